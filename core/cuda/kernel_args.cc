#include "core/cuda/kernel_args.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tensord::core::cuda {

ElemType ToElem(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return ElemType::kF32;
    case DType::kFloat64:
      return ElemType::kF64;
    case DType::kInt32:
      return ElemType::kI32;
    case DType::kInt64:
      return ElemType::kI64;
    case DType::kBool:
      return ElemType::kBool;
    case DType::kFloat16:
      return ElemType::kF16;
    case DType::kBFloat16:
      return ElemType::kBF16;
  }
  return ElemType::kF32;  // unreachable: dtypes are validated upstream
}

absl::StatusOr<BinaryIndex> MakeBinaryIndex(const Shape& a, const Shape& b,
                                            const Shape& out) {
  if (out.rank() > kMaxKernelRank) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", out.rank(), " exceeds ", kMaxKernelRank));
  }
  BinaryIndex result;
  result.contiguous = a == out && b == out;
  if (result.contiguous) return result;
  const std::vector<int64_t> sa = BroadcastStrides(a, out);
  const std::vector<int64_t> sb = BroadcastStrides(b, out);
  BroadcastIndex& index = result.index;
  index.rank = out.rank();
  for (int d = 0; d < index.rank; ++d) {
    index.dims[d] = out.dim(d);
    index.a_strides[d] = sa[d];
    index.b_strides[d] = sb[d];
  }
  return result;
}

absl::StatusOr<WhereIndex> MakeWhereIndex(const Shape& cond, const Shape& x,
                                          const Shape& y, const Shape& out) {
  if (out.rank() > kMaxKernelRank) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", out.rank(), " exceeds ", kMaxKernelRank));
  }
  WhereIndex index;
  index.rank = out.rank();
  const Shape* operands[] = {&cond, &x, &y};
  for (int k = 0; k < 3; ++k) {
    const std::vector<int64_t> s = BroadcastStrides(*operands[k], out);
    for (int d = 0; d < index.rank; ++d) index.strides[k][d] = s[d];
  }
  for (int d = 0; d < index.rank; ++d) index.dims[d] = out.dim(d);
  return index;
}

absl::StatusOr<BroadcastIndex> MakePermuteIndex(const Shape& in,
                                                const std::vector<int>& perm) {
  const int rank = in.rank();
  if (rank > kMaxKernelRank || static_cast<int>(perm.size()) != rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("permute of rank ", rank, " with ", perm.size(), " dims"));
  }
  bool seen[kMaxKernelRank] = {};
  for (int p : perm) {
    if (p < 0 || p >= rank || seen[p]) {
      return absl::InvalidArgumentError(
          absl::StrCat("permute of rank ", rank, ": [",
                       absl::StrJoin(perm, ", "), "] is not a permutation"));
    }
    seen[p] = true;
  }
  int64_t in_strides[kMaxKernelRank];
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    in_strides[d] = stride;
    // Past int64 only beside a zero dim: never followed, must not overflow.
    if (__builtin_mul_overflow(stride, in.dim(d), &stride)) stride = INT64_MAX;
  }
  BroadcastIndex index;
  index.rank = rank;
  for (int i = 0; i < rank; ++i) {
    index.dims[i] = in.dim(perm[i]);
    index.a_strides[i] = in_strides[perm[i]];
  }
  return index;
}

}  // namespace tensord::core::cuda
