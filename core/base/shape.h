// Tensor shapes: validated dimensions, overflow-checked sizes, broadcasting.
//
// A Shape is always valid once constructed through Make(): rank 0..kMaxRank,
// every dim >= 0, element count and byte size representable (checked for a
// given dtype by ByteSize()). Thread-safety: immutable value type.
#ifndef TENSORD_CORE_BASE_SHAPE_H_
#define TENSORD_CORE_BASE_SHAPE_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/base/dtype.h"

namespace tensord::core {

inline constexpr int kMaxRank = 8;
// Largest byte size of one tensor tensord accepts (2^48 bytes = 256 TiB):
// far above any device, far below overflow of int64/size_t arithmetic.
inline constexpr uint64_t kMaxTensorBytes = uint64_t{1} << 48;

class Shape {
 public:
  Shape() = default;  // 0-d (scalar) shape, one element.

  // Validates rank (<= kMaxRank), dims (>= 0) and that the element count
  // does not overflow. INVALID_ARGUMENT naming the offending dim otherwise.
  static absl::StatusOr<Shape> Make(std::span<const int64_t> dims);

  int rank() const { return rank_; }
  int64_t dim(int i) const { return dims_[i]; }
  // The dims, stored inline (a Shape never allocates: ops copy shapes
  // freely).
  std::span<const int64_t> dims() const {
    return {dims_.data(), static_cast<size_t>(rank_)};
  }
  std::vector<int64_t> DimsVector() const {
    return {dims_.begin(), dims_.begin() + rank_};
  }
  int64_t NumElements() const { return num_elements_; }
  // The product of dims [begin, end): the elements of a block of those dims
  // (1 for an empty range; 0 when one of them is 0). A shape with a zero dim
  // may have blocks whose product exceeds int64 ([0, 2^40, 2^40]): such a
  // product saturates at INT64_MAX (any work over it is empty, since the
  // tensor is). Precondition: 0 <= begin <= end <= rank().
  int64_t NumElements(int begin, int end) const;

  // numel x DTypeSize(dtype), INVALID_ARGUMENT if over kMaxTensorBytes.
  absl::StatusOr<uint64_t> ByteSize(DType dtype) const;

  // "[2, 3]"; "[]" for 0-d.
  std::string ToString() const;

  bool operator==(const Shape& other) const {
    return rank_ == other.rank_ &&
           std::equal(dims_.begin(), dims_.begin() + rank_,
                      other.dims_.begin());
  }
  bool operator!=(const Shape& other) const { return !(*this == other); }

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
  int64_t num_elements_ = 1;
};

// NumPy/PyTorch broadcasting of two shapes. INVALID_ARGUMENT in torch's
// words otherwise, naming the first incompatible dimension from the right:
// "The size of tensor a (3) must match the size of tensor b (4) at
// non-singleton dimension 1".
absl::StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b);

// torch's expand of `tensor` to `target` (one-way broadcasting, as addmm
// expands its bias): OK, or INVALID_ARGUMENT in torch's words, "The
// expanded size of the tensor (4) must match the existing size (5) at
// non-singleton dimension 1.  Target sizes: [2, 4].  Tensor sizes: [5]".
absl::Status CheckExpand(const Shape& tensor, const Shape& target);

// Element strides (row-major, contiguous) that read `in` as if it had shape
// `out` under broadcasting: 0 for broadcast dims. Result has out.rank()
// entries. Precondition: BroadcastShapes(in, out) == out.
std::vector<int64_t> BroadcastStrides(const Shape& in, const Shape& out);

}  // namespace tensord::core

#endif  // TENSORD_CORE_BASE_SHAPE_H_
