// Internal: the CPU device's kernels on raw host pointers.
//
// Preconditions as Device's kernels (the CpuDevice checks Supports() and the
// Runtime validates shapes and sizes): every pointer addresses enough
// elements of the stated dtype. Kernels run synchronously on the calling
// thread (OpenBLAS may use its own threads).
// Thread-safety: stateless; concurrent calls on disjoint outputs are safe.
#ifndef TENSORD_CORE_CPU_CPU_KERNELS_H_
#define TENSORD_CORE_CPU_CPU_KERNELS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/shape.h"

namespace tensord::core::cpu {

// Fills `numel` elements. kRand/kRandn need float32/float64; an unset seed
// is drawn from std::random_device. float16/bfloat16 take every non-random
// fill.
absl::Status FillKernel(const FillSpec& spec, DType dtype, int64_t numel,
                        void* out);

// Element-wise conversion between float32/float64/int32/int64/bool.
// Floating -> integer saturates (NaN -> 0); anything -> bool is != 0.
absl::Status CastKernel(DType in_dtype, const void* in, DType out_dtype,
                        void* out, int64_t numel);

// out = a (op) b with broadcasting; one dtype for all three. Integer
// add/sub/mul wrap around; bool add/mul are logical or/and; integer and
// bool div and bool sub are FAILED_PRECONDITION.
absl::Status BinaryKernel(BinaryOp op, DType dtype, const void* a,
                          const Shape& a_shape, const void* b,
                          const Shape& b_shape, void* out,
                          const Shape& out_shape);

// Batched row-major matmul per Device::MatMulDims. float32/float64 through
// OpenBLAS; int32/int64 with wrapping arithmetic.
absl::Status MatMulKernel(const Device::MatMulDims& dims, DType dtype,
                          const void* a, const void* b, void* out);

}  // namespace tensord::core::cpu

#endif  // TENSORD_CORE_CPU_CPU_KERNELS_H_
