// Internal: the CPU device's kernels on raw host pointers.
//
// Preconditions as Device::Launch's (the planner and the executor check
// dtypes, shapes and sizes; nothing here checks them again): every pointer
// addresses enough elements of the stated dtype. Kernels run synchronously
// on the calling thread (OpenBLAS may use its own threads).
// Thread-safety: stateless; concurrent calls on disjoint outputs are safe.
#ifndef TENSORD_CORE_CPU_CPU_KERNELS_H_
#define TENSORD_CORE_CPU_CPU_KERNELS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/base/device.h"
#include "core/base/dtype.h"
#include "core/base/shape.h"

namespace tensord::core::cpu {

// The arithmetic is core/base/scalar_ops.h's, the CUDA kernels' too; float16
// and bfloat16 compute in float32 and round back to nearest even. A kernel
// asked for an op its dtype does not define (the planner never asks) is
// FAILED_PRECONDITION "\"op\" not implemented for 'dtype' on cpu".

// Fills `numel` elements. kRand/kRandn need float32/float64; an unset seed
// is drawn from std::random_device.
absl::Status FillKernel(const FillSpec& spec, DType dtype, int64_t numel,
                        void* out);

// Element-wise conversion between any two dtypes.
absl::Status CastKernel(DType in_dtype, const void* in, DType out_dtype,
                        void* out, int64_t numel);

// out = a (op) b with broadcasting; `dtype` is a's and b's, and out's too
// except for comparisons (out is bool). `out` may alias `a` when
// out_shape == a_shape.
absl::Status BinaryKernel(BinaryOp op, DType dtype, const void* a,
                          const Shape& a_shape, const void* b,
                          const Shape& b_shape, void* out,
                          const Shape& out_shape);

// out = op(in) over `numel` elements of `dtype` (out may alias in).
absl::Status UnaryKernel(UnaryOp op, double alpha, double beta, DType dtype,
                         const void* in, void* out, int64_t numel);

// KernelKind::kReduce on host memory. kMax/kMin/kArgmax over n == 0 (which the
// planner rejects) are INTERNAL.
absl::Status ReduceKernel(ReduceOp op, DType dtype, const ReduceDims& dims,
                          const void* in, void* out);

// KernelKind::kPermute on host memory for elements of `elem_size` bytes.
void PermuteKernel(size_t elem_size, const void* in, const Shape& in_shape,
                   const std::vector<int>& perm, void* out);

// out = where(cond, x, y) over out_shape (KernelKind::kWhere): cond is
// bool bytes, x and y of `dtype`, each read through broadcast strides.
absl::Status WhereKernel(DType dtype, const void* cond, const Shape& cond_shape,
                         const void* x, const Shape& x_shape, const void* y,
                         const Shape& y_shape, void* out,
                         const Shape& out_shape);

// KernelKind::kIm2Col on host memory for elements of `elem_size` bytes
// (1, 2, 4 or 8): `pad_bits`' low bytes fill the padding.
void Im2ColKernel(size_t elem_size, const WindowDims& dims, uint64_t pad_bits,
                  const void* in, void* out);

// KernelKind::kCol2Im on host memory: each element of `out` [n, c, h, w]
// gathers the entries of `cols` [c, kh, kw, n, oh, ow] that read it, in a
// fixed order (deterministic). FAILED_PRECONDITION for a non-floating
// dtype (the planner never asks).
absl::Status Col2ImKernel(DType dtype, const WindowDims& dims,
                          const void* cols, void* out);

// Batched row-major matmul per MatMulDims. float32/float64 through
// OpenBLAS, the half types widened to float32 for it; int32/int64 with
// wrapping arithmetic.
absl::Status MatMulKernel(const MatMulDims& dims, DType dtype, const void* a,
                          const void* b, void* out);

}  // namespace tensord::core::cpu

#endif  // TENSORD_CORE_CPU_CPU_KERNELS_H_
