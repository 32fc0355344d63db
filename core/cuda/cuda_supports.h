// What the CUDA device computes: its Device::Supports table, with the
// message a client sees. The op rules (bool subtraction, integer division
// computing in float32, mean of integers, ...) are the planner's, the same
// on every device; the kernels trust them and check nothing again.
//
// The table: fill, cast, binary, unary and reduce ops for every dtype (the
// half types computing in float32 through core/scalar_ops.h, as on the
// CPU); random fills for floating dtypes; matmul for all but bool. Plain C++
// with no CUDA type (the CUDA device asks these before any launch), unit-tested
// in every build (tests/core/cuda_host_logic_test.cc). `device` is the device's
// name for messages. Thread-safety: pure functions.
#ifndef TENSORD_CORE_CUDA_CUDA_SUPPORTS_H_
#define TENSORD_CORE_CUDA_CUDA_SUPPORTS_H_

#include <string_view>

#include "absl/status/status.h"
#include "core/device.h"
#include "core/dtype.h"

namespace tensord::core::cuda {

// Device::Supports of a CUDA device: OK, or FAILED_PRECONDITION from
// NotImplementedError (core/op_checks.h) naming the op kind, dtype and
// `device`.
absl::Status SupportsOp(OpKind op, DType dtype, std::string_view device);

}  // namespace tensord::core::cuda

#endif  // TENSORD_CORE_CUDA_CUDA_SUPPORTS_H_
