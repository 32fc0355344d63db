// Core's vocabulary turned into the CUDA kernel launchers' arguments
// (core/cuda/kernel_types.h): the element type of a dtype, and the index a
// broadcasting binary kernel or a permute kernel walks.
//
// The kernels decode a flat output position i into coordinates over
// index.dims, innermost dim fastest, and read operand a at
// sum(coord[d] * a_strides[d]) (b likewise). Plain C++ with no CUDA type,
// unit-tested in every build (tests/core/cuda_host_logic_test.cc) by walking
// the index the way the kernels do.
// Thread-safety: pure functions.
#ifndef TENSORD_CORE_CUDA_KERNEL_ARGS_H_
#define TENSORD_CORE_CUDA_KERNEL_ARGS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "core/cuda/kernel_types.h"
#include "core/base/dtype.h"
#include "core/base/shape.h"

namespace tensord::core::cuda {

// Every valid Shape fits a kernel index.
static_assert(kMaxRank <= kMaxKernelRank);

// The launchers' element type of `dtype` (a validated dtype).
ElemType ToElem(DType dtype);

// How a binary kernel reads its operands.
struct BinaryIndex {
  // a, b and out all have out's shape: element i of each, no index.
  bool contiguous = false;
  // Otherwise out's dims and each operand's broadcast strides (0 along a
  // broadcast dim); rank 0 and unused when contiguous.
  BroadcastIndex index;
};
// The index of out = a (op) b, where out = BroadcastShapes(a, b) (the
// planner's guarantee). INVALID_ARGUMENT "rank R exceeds 8" for an out rank
// above kMaxKernelRank (unreachable through a valid Shape).
absl::StatusOr<BinaryIndex> MakeBinaryIndex(const Shape& a, const Shape& b,
                                            const Shape& out);

// The index of out = where(cond, x, y) (KernelKind::kWhere), where out is
// the broadcast of the three shapes (the planner's guarantee).
// INVALID_ARGUMENT "rank R exceeds 8" for an out rank above kMaxKernelRank.
absl::StatusOr<WhereIndex> MakeWhereIndex(const Shape& cond, const Shape& x,
                                          const Shape& y, const Shape& out);

// The index of out = in.permute(perm): out's dims (in's dims in perm's
// order) and, as a_strides, the contiguous strides of in's dims in that
// order; b_strides unused. INVALID_ARGUMENT "permute of rank R with N dims"
// when perm's size is not in's rank (or the rank is above kMaxKernelRank),
// and "permute of rank R: [..] is not a permutation" when perm has an entry
// outside [0, rank) or a repeated one (the planner never plans either; the
// check keeps a bad call from reading or writing out of bounds).
absl::StatusOr<BroadcastIndex> MakePermuteIndex(const Shape& in,
                                                const std::vector<int>& perm);

}  // namespace tensord::core::cuda

#endif  // TENSORD_CORE_CUDA_KERNEL_ARGS_H_
