// The host communicator of a build without Gloo: collectives are off, and
// say how to turn them on.
#include "core/collectives/host_communicator.h"

namespace tensord::core {

bool HostCollectivesBuilt() { return false; }
std::string HostCollectivesEngine() { return ""; }

absl::StatusOr<std::unique_ptr<HostCommunicator>> ConnectHostCommunicator(
    int world, std::chrono::milliseconds timeout) {
  return absl::FailedPreconditionError(
      "collectives over host devices need Gloo, and this tensord was built "
      "without it (install libgloo-dev and build again: docs/building.md)");
}

}  // namespace tensord::core
