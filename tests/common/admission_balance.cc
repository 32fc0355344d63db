// Issue 30: bytes allocated equal bytes admitted, over a whole test
// process. Linked into every test binary that runs a Runtime (see
// tensord_test in tests/CMakeLists.txt); at the end of the run it checks
// that every byte a device allocated was spent from an Admission
// (core/runtime/admission.h), so an allocation path that bypasses admission fails
// the suite that exercises it, and that every admission was spent or given
// back.
#include <gtest/gtest.h>

#include <cstdio>

#include "core/runtime/admission.h"
#include "core/base/device.h"

namespace tensord::core {
namespace {

class AdmissionBalance : public ::testing::Environment {
 public:
  void TearDown() override {
    const AdmissionTotals t = GetAdmissionTotals();
    const uint64_t allocated = DeviceBytesAllocated();
    std::printf(
        "[admission] allocated %llu bytes, admitted %llu (spent %llu, "
        "given back %llu), %llu refusals\n",
        static_cast<unsigned long long>(allocated),
        static_cast<unsigned long long>(t.admitted_bytes),
        static_cast<unsigned long long>(t.spent_bytes),
        static_cast<unsigned long long>(t.given_back_bytes),
        static_cast<unsigned long long>(t.refusals));
    EXPECT_EQ(allocated, t.spent_bytes)
        << "device memory was allocated without an Admission";
    EXPECT_EQ(t.admitted_bytes, t.spent_bytes + t.given_back_bytes)
        << "an Admission is still alive after the run, or was counted twice";
  }
};

[[maybe_unused]] ::testing::Environment* const kBalance =
    ::testing::AddGlobalTestEnvironment(new AdmissionBalance);

}  // namespace
}  // namespace tensord::core
