#include "core/base/shape.h"

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/absl_compat.h"

namespace tensord::core {
namespace {

std::string DimsToString(std::span<const int64_t> dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

}  // namespace

absl::StatusOr<Shape> Shape::Make(std::span<const int64_t> dims) {
  if (dims.size() > static_cast<size_t>(kMaxRank)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", dims.size(), " exceeds the maximum rank ", kMaxRank));
  }
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dimension ", i, " is ", dims[i], "; dims must be >= 0"));
    }
  }
  int64_t numel = 1;
  bool overflow = false;
  for (int64_t d : dims) {
    // A zero dim makes the product 0 whatever else overflows: such a shape
    // is valid (PyTorch accepts torch.empty(0, 2**62, 2**62)).
    if (d == 0) {
      numel = 0;
      overflow = false;
      break;
    }
    if (!overflow) overflow = __builtin_mul_overflow(numel, d, &numel);
  }
  if (overflow) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape ", DimsToString(dims),
                     " has too many elements: the element count overflows "
                     "a 64-bit integer"));
  }
  Shape shape;
  std::copy(dims.begin(), dims.end(), shape.dims_.begin());
  shape.rank_ = static_cast<int>(dims.size());
  shape.num_elements_ = numel;
  return shape;
}

absl::StatusOr<uint64_t> Shape::ByteSize(DType dtype) const {
  uint64_t bytes = 0;
  const bool overflow = __builtin_mul_overflow(
      static_cast<uint64_t>(num_elements_), DTypeSize(dtype), &bytes);
  if (overflow || bytes > kMaxTensorBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shape ", ToString(), " with dtype ", ToAbsl(DTypeName(dtype)),
        " is too large (", num_elements_, " elements of ", DTypeSize(dtype),
        " bytes; at most ", kMaxTensorBytes, " bytes per tensor)"));
  }
  return bytes;
}

std::string Shape::ToString() const { return DimsToString(dims()); }

absl::StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b) {
  const int rank = std::max(a.rank(), b.rank());
  std::vector<int64_t> dims(rank);
  // From the right, as torch's infer_size: the first mismatch it meets is
  // the one its message names.
  for (int i = rank - 1; i >= 0; --i) {
    // Dimensions align from the right; missing leading dims are 1.
    const int ai = i - (rank - a.rank());
    const int bi = i - (rank - b.rank());
    const int64_t da = ai >= 0 ? a.dim(ai) : 1;
    const int64_t db = bi >= 0 ? b.dim(bi) : 1;
    if (da != db && da != 1 && db != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "The size of tensor a (", da, ") must match the size of tensor b (",
          db, ") at non-singleton dimension ", i));
    }
    dims[i] = da == 1 ? db : da;
  }
  // Cannot fail: every dim is one of the (valid) input dims.
  return Shape::Make(dims);
}

absl::Status CheckExpand(const Shape& tensor, const Shape& target) {
  if (tensor.rank() > target.rank()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expand: the number of sizes provided (", target.rank(),
        ") must be greater or equal to the number of dimensions in the "
        "tensor (",
        tensor.rank(), ")"));
  }
  for (int i = target.rank() - 1; i >= 0; --i) {
    const int ti = i - (target.rank() - tensor.rank());
    if (ti < 0) break;
    if (tensor.dim(ti) != 1 && tensor.dim(ti) != target.dim(i)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "The expanded size of the tensor (", target.dim(i),
          ") must match the existing size (", tensor.dim(ti),
          ") at non-singleton dimension ", i, ".  Target sizes: ",
          target.ToString(), ".  Tensor sizes: ", tensor.ToString()));
    }
  }
  return absl::OkStatus();
}

int64_t Shape::NumElements(int begin, int end) const {
  int64_t n = 1;
  bool saturated = false;
  for (int i = begin; i < end; ++i) {
    if (dims_[i] == 0) return 0;
    if (!saturated) saturated = __builtin_mul_overflow(n, dims_[i], &n);
  }
  return saturated ? INT64_MAX : n;
}

std::vector<int64_t> BroadcastStrides(const Shape& in, const Shape& out) {
  std::vector<int64_t> strides(out.rank(), 0);
  int64_t stride = 1;
  for (int i = in.rank() - 1; i >= 0; --i) {
    const int oi = i + (out.rank() - in.rank());
    strides[oi] = (in.dim(i) == 1 && out.dim(oi) != 1) ? 0 : stride;
    // An empty tensor's strides are never followed; they must only not
    // overflow ([0, 2^40, 2^40]).
    if (__builtin_mul_overflow(stride, in.dim(i), &stride)) stride = INT64_MAX;
  }
  return strides;
}

}  // namespace tensord::core
