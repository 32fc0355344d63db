// HostCommunicator: the collectives of one group of host devices of this
// node, each device one rank, run by an engine the field trusts (Gloo,
// PyTorch's engine on CPUs: core/collectives/gloo_communicator.cc) — never
// by code of our own but for the element-wise reductions
// (core/collectives/reduce_kernels.h).
//
// Each call takes every rank's buffer (index = rank) and returns once every
// rank's part is done: the ranks run concurrently, one thread each, talking
// over the engine's transport (Gloo: TCP on loopback), as separate devices
// would. Buffers are host memory the caller keeps alive and unchanged by
// anyone else during the call; the caller validated them (counts, dtypes,
// CheckReduceOp), so the engine may assume valid input.
//
// Failures: an engine error or a rank past `timeout` is UNAVAILABLE naming
// the rank; the communicator is then broken (its engine state is unknown)
// and every later call is FAILED_PRECONDITION saying so.
//
// Thread-safety: calls serialize on the communicator (every rank must see
// the collectives in one order); different communicators run concurrently.
#ifndef TENSORD_CORE_COLLECTIVES_HOST_COMMUNICATOR_H_
#define TENSORD_CORE_COLLECTIVES_HOST_COMMUNICATOR_H_

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/base/dtype.h"
#include "core/collectives/collective.h"

namespace tensord::core {

class HostCommunicator {
 public:
  virtual ~HostCommunicator() = default;

  virtual int world_size() const = 0;
  // The engine and its transport, for listings and the log ("gloo 0.5.0,
  // tcp on 127.0.0.1").
  virtual const std::string& engine() const = 0;

  // data[r]: rank r's `count` elements, replaced on every rank by the
  // reduction of all ranks' (kAvg: the sum divided by the world size).
  virtual absl::Status AllReduce(std::span<void* const> data, size_t count,
                                 DType dtype, Reduction op) = 0;
  // data[r]: `bytes` bytes; every rank's become rank `root`'s.
  virtual absl::Status Broadcast(std::span<void* const> data, size_t bytes,
                                 int root) = 0;
  // in[r]: `bytes` bytes; out[r]: world_size() x `bytes`, rank 0's first.
  virtual absl::Status AllGather(std::span<const void* const> in,
                                 std::span<void* const> out,
                                 size_t bytes) = 0;
  virtual absl::Status Barrier() = 0;
};

// Whether this build has an engine for host collectives, and which ("" and
// false without one).
bool HostCollectivesBuilt();
std::string HostCollectivesEngine();

// Connects `world` ranks (1 to 64) on this node; each call waits at most
// `timeout` for every rank. FAILED_PRECONDITION when the build has no
// engine ("built without Gloo"); UNAVAILABLE when the ranks cannot connect.
absl::StatusOr<std::unique_ptr<HostCommunicator>> ConnectHostCommunicator(
    int world, std::chrono::milliseconds timeout);

}  // namespace tensord::core

#endif  // TENSORD_CORE_COLLECTIVES_HOST_COMMUNICATOR_H_
