#include "core/cuda/copy_plan.h"

#include <algorithm>

#include "core/base/op_checks.h"
#include "core/base/status.h"

namespace tensord::core::cuda {
namespace {

// Where the last of `rows` rows starts: offset + (rows - 1) * stride, or
// false when that overflows int64.
bool LastRowStart(int64_t offset, int64_t stride, int64_t rows,
                  int64_t* start) {
  int64_t span = 0;
  return !__builtin_mul_overflow(rows - 1, stride, &span) &&
         !__builtin_add_overflow(offset, span, start);
}

}  // namespace

absl::StatusOr<BlockCopyMethod> PlanBlockCopy(const BlockCopy& c,
                                              const Buffer& src,
                                              const Buffer& dst) {
  if (c.rows <= 0 || c.row_bytes <= 0) return BlockCopyMethod::kNothing;
  int64_t src_end = 0, dst_end = 0;
  if (!LastRowStart(c.src_offset, c.src_stride, c.rows, &src_end) ||
      !LastRowStart(c.dst_offset, c.dst_stride, c.rows, &dst_end)) {
    return absl::OutOfRangeError("block copy offsets overflow");
  }
  if (c.src_offset < 0 || c.dst_offset < 0 || src_end < 0 || dst_end < 0) {
    return absl::OutOfRangeError("block copy with a negative offset");
  }
  // Rows start between the first and the last row's start (a stride may be
  // negative); the later of the two must end inside the buffer.
  const auto src_last = static_cast<size_t>(std::max(c.src_offset, src_end));
  const auto dst_last = static_cast<size_t>(std::max(c.dst_offset, dst_end));
  const auto row_bytes = static_cast<size_t>(c.row_bytes);
  RETURN_IF_ERROR(CheckRange(src, src_last, row_bytes));
  RETURN_IF_ERROR(CheckRange(dst, dst_last, row_bytes));
  if (c.rows == 1) return BlockCopyMethod::kMemcpy;
  if (c.src_stride >= c.row_bytes && c.dst_stride >= c.row_bytes &&
      c.src_stride <= kMaxMemcpy2DPitch && c.dst_stride <= kMaxMemcpy2DPitch) {
    return BlockCopyMethod::kMemcpy2D;
  }
  return BlockCopyMethod::kKernel;
}

DeviceCopyRoute ChooseDeviceCopyRoute(DeviceKind src_kind, bool same_device,
                                      bool peer_access) {
  if (src_kind != DeviceKind::kCuda) return DeviceCopyRoute::kFromHost;
  if (same_device) return DeviceCopyRoute::kSameDevice;
  return peer_access ? DeviceCopyRoute::kPeer : DeviceCopyRoute::kStaged;
}

}  // namespace tensord::core::cuda
