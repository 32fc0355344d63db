// Which copy the CUDA device issues, as plain data: the method of a block
// copy (KernelKind::kCopyBlocks) after its bounds checks, and the route of a
// copy from another device (Device::CopyFromDevice).
//
// Names no CUDA type; core/cuda/cuda_device.cc issues the CUDA call each
// choice names. Unit-tested in every build
// (tests/core/cuda_host_logic_test.cc).
// Thread-safety: pure functions.
#ifndef TENSORD_CORE_CUDA_COPY_PLAN_H_
#define TENSORD_CORE_CUDA_COPY_PLAN_H_

#include <climits>
#include <cstdint>

#include "absl/status/statusor.h"
#include "core/base/device.h"

namespace tensord::core::cuda {

// cudaMemcpy2DAsync rejects pitches above the device's maximum pitch
// (cudaDevAttrMaxPitch, 2^31 - 1 on every GPU so far).
inline constexpr int64_t kMaxMemcpy2DPitch = INT_MAX;

enum class BlockCopyMethod {
  kNothing,   // no rows or empty rows
  kMemcpy,    // one row: cudaMemcpyAsync
  kMemcpy2D,  // rows whose strides are pitches: cudaMemcpy2DAsync
  kKernel,    // anything else (overlapping or negative strides, huge
              // pitches): the block copy kernel
};

// The method for `copy` from `src` into `dst`, after checking that every
// byte it reads and writes lies inside its buffer. OUT_OF_RANGE "block copy
// with a negative offset" when the first or last row of either side starts
// before its buffer; OUT_OF_RANGE from CheckRange (op_checks.h) when one
// ends past it, or when the offsets overflow int64. kNothing (without
// checks) for rows <= 0 or row_bytes <= 0.
absl::StatusOr<BlockCopyMethod> PlanBlockCopy(const BlockCopy& copy,
                                              const Buffer& src,
                                              const Buffer& dst);

enum class DeviceCopyRoute {
  kFromHost,    // the source is not a CUDA device: its buffers are host
                // memory (Device's contract), an upload
  kSameDevice,  // cudaMemcpyAsync device to device on this device's stream
  kPeer,        // cudaMemcpyPeerAsync: this device may access the source's
  kStaged,      // through pinned host memory, chunk by chunk
};

// The route of a copy into this CUDA device from a device of `src_kind`;
// `same_device` and `peer_access` (this device may read the source's
// memory directly) matter only for a CUDA source.
DeviceCopyRoute ChooseDeviceCopyRoute(DeviceKind src_kind, bool same_device,
                                      bool peer_access);

}  // namespace tensord::core::cuda

#endif  // TENSORD_CORE_CUDA_COPY_PLAN_H_
