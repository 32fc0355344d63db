// What the CUDA device computes: its Device::Supports table and the
// per-op dtype rules its kernels add to it, each with the message a client
// sees.
//
// The table: fill, cast, binary, unary and reduce ops for every dtype (the
// half types computing in float32 through core/scalar_ops.h, as on the
// CPU); random fills for floating dtypes; matmul for all but bool. Plain C++
// with no CUDA type (the CUDA device asks these before any launch), unit-tested
// in every build (tests/core/cuda_host_logic_test.cc). `device` is the device's
// name for messages. Thread-safety: pure functions.
#ifndef TENSORD_CORE_CUDA_CUDA_SUPPORTS_H_
#define TENSORD_CORE_CUDA_CUDA_SUPPORTS_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "core/device.h"
#include "core/dtype.h"

namespace tensord::core::cuda {

// Device::Supports of a CUDA device: OK, or FAILED_PRECONDITION from
// NotImplementedError (core/op_checks.h) naming the op kind, dtype and
// `device`.
absl::Status SupportsOp(OpKind op, DType dtype, std::string_view device);

// Whether the binary kernel runs `op` on operands of `dtype`: the table,
// then the rules of every device (CheckBinaryOpDType: bool sub and pow),
// then the CUDA kernel's own: div of integers or bool is not implemented
// (the planner computes it in float32). FAILED_PRECONDITION otherwise.
absl::Status CheckBinary(BinaryOp op, DType dtype, std::string_view device);

// Whether the unary kernel runs `op` on `dtype`: the table, the rules of
// every device (CheckUnaryOpDType), then floating functions (exp, log, ...)
// of a non-floating dtype are not implemented. FAILED_PRECONDITION
// otherwise.
absl::Status CheckUnary(UnaryOp op, DType dtype, std::string_view device);

// Whether the reduce kernel runs `op` over `n` elements of `dtype`: the
// table (FAILED_PRECONDITION), then INVALID_ARGUMENT "max(): cannot reduce
// over an empty dimension" for max/min/argmax with n == 0, then
// FAILED_PRECONDITION for mean or norm of a non-floating dtype.
absl::Status CheckReduce(ReduceOp op, int64_t n, DType dtype,
                         std::string_view device);

}  // namespace tensord::core::cuda

#endif  // TENSORD_CORE_CUDA_CUDA_SUPPORTS_H_
