// Test-only: allocation on a Device without admission, for the tests of
// devices themselves.
//
// Device::Allocate takes an AllocationGrant that only the Admitter makes
// (core/base/device.h, core/runtime/admission.h), so nothing in the daemon can take
// device memory without admitting it. The tests of a device alone — its
// allocation, copies and kernels (cpu_device_test, device conformance,
// FaultyDevice's own tests) — run no Runtime, so there is no session or
// budget to admit against; DeviceTestAccess, AllocationGrant's one other
// friend, is how they allocate. It is defined only here, under tests/, and
// the binaries that include it are left out of the allocated == admitted
// check (TENSORD_DEVICE_LEVEL_TESTS in tests/CMakeLists.txt).
//
// Thread-safety: as Device::Allocate.
#ifndef TENSORD_TESTS_CORE_DEVICE_TEST_ACCESS_H_
#define TENSORD_TESTS_CORE_DEVICE_TEST_ACCESS_H_

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "core/base/device.h"

namespace tensord::core {

class DeviceTestAccess {
 public:
  // device.Allocate of `bytes`, unadmitted.
  static absl::StatusOr<std::unique_ptr<Buffer>> Allocate(Device& device,
                                                          size_t bytes) {
    return device.Allocate(AllocationGrant(bytes));
  }
};

}  // namespace tensord::core

#endif  // TENSORD_TESTS_CORE_DEVICE_TEST_ACCESS_H_
