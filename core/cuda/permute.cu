#include "core/cuda/kernel_common.cuh"
#include "core/cuda/permute.cuh"

namespace tensord::core::cuda {
namespace {

template <typename W>
__global__ void PermuteKernel(const W* in, W* out, int64_t numel,
                              BroadcastIndex idx) {
  for (int64_t i = GridStart(); i < numel; i += GridStep()) {
    int64_t rest = i, offset = 0;
    for (int d = idx.rank - 1; d >= 0; --d) {
      offset += (rest % idx.dims[d]) * idx.a_strides[d];
      rest /= idx.dims[d];
    }
    out[i] = in[offset];
  }
}

// Words of W bytes: every offset, stride and length is a multiple of W.
template <typename W>
__global__ void BlockCopyKernel(const char* src, int64_t src_stride, char* dst,
                                int64_t dst_stride, int64_t rows,
                                int64_t row_words) {
  const int64_t total = rows * row_words;
  for (int64_t t = GridStart(); t < total; t += GridStep()) {
    const int64_t r = t / row_words, w = t % row_words;
    reinterpret_cast<W*>(dst + r * dst_stride)[w] =
        reinterpret_cast<const W*>(src + r * src_stride)[w];
  }
}

}  // namespace

cudaError_t LaunchPermute(size_t elem_size, const void* in, void* out,
                          int64_t numel, const BroadcastIndex& index,
                          cudaStream_t stream) {
  if (numel <= 0) return cudaSuccess;
  const unsigned int grid = GridBlocks(numel);
  switch (elem_size) {
    case 1:
      PermuteKernel<uint8_t><<<grid, kBlockThreads, 0, stream>>>(
          static_cast<const uint8_t*>(in), static_cast<uint8_t*>(out), numel,
          index);
      break;
    case 2:
      PermuteKernel<uint16_t><<<grid, kBlockThreads, 0, stream>>>(
          static_cast<const uint16_t*>(in), static_cast<uint16_t*>(out), numel,
          index);
      break;
    case 4:
      PermuteKernel<uint32_t><<<grid, kBlockThreads, 0, stream>>>(
          static_cast<const uint32_t*>(in), static_cast<uint32_t*>(out), numel,
          index);
      break;
    case 8:
      PermuteKernel<uint64_t><<<grid, kBlockThreads, 0, stream>>>(
          static_cast<const uint64_t*>(in), static_cast<uint64_t*>(out), numel,
          index);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t LaunchCopyBlocks(const void* src, int64_t src_stride, void* dst,
                             int64_t dst_stride, int64_t rows,
                             int64_t row_bytes, cudaStream_t stream) {
  if (rows <= 0 || row_bytes <= 0) return cudaSuccess;
  const auto s = reinterpret_cast<uintptr_t>(src);
  const auto d = reinterpret_cast<uintptr_t>(dst);
  const auto aligned = [&](uint64_t w) {
    return s % w == 0 && d % w == 0 &&
           static_cast<uint64_t>(src_stride) % w == 0 &&
           static_cast<uint64_t>(dst_stride) % w == 0 &&
           static_cast<uint64_t>(row_bytes) % w == 0;
  };
  const char* sp = static_cast<const char*>(src);
  char* dp = static_cast<char*>(dst);
  if (aligned(8)) {
    BlockCopyKernel<uint64_t>
        <<<GridBlocks(rows * (row_bytes / 8)), kBlockThreads, 0, stream>>>(
            sp, src_stride, dp, dst_stride, rows, row_bytes / 8);
  } else if (aligned(4)) {
    BlockCopyKernel<uint32_t>
        <<<GridBlocks(rows * (row_bytes / 4)), kBlockThreads, 0, stream>>>(
            sp, src_stride, dp, dst_stride, rows, row_bytes / 4);
  } else {
    BlockCopyKernel<uint8_t>
        <<<GridBlocks(rows * row_bytes), kBlockThreads, 0, stream>>>(
            sp, src_stride, dp, dst_stride, rows, row_bytes);
  }
  return cudaGetLastError();
}

}  // namespace tensord::core::cuda
