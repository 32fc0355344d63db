#include "core/cuda/cast.cuh"
#include "core/cuda/kernel_common.cuh"

namespace tensord::core::cuda {
namespace {

template <typename To, typename From>
__global__ void CastKernel(const From* in, To* out, int64_t numel) {
  for (int64_t i = GridStart(); i < numel; i += GridStep()) {
    out[i] = CastElement<To, From>(in[i]);
  }
}

}  // namespace

cudaError_t LaunchCast(ElemType in_type, const void* in, ElemType out_type,
                       void* out, int64_t numel, cudaStream_t stream) {
  bool known_out = false;
  const bool known_in = DispatchElem(in_type, [&](auto from_tag) {
    using From = typename decltype(from_tag)::type;
    known_out = DispatchElem(out_type, [&](auto to_tag) {
      using To = typename decltype(to_tag)::type;
      if (numel <= 0) return;
      CastKernel<To, From><<<GridBlocks(numel), kBlockThreads, 0, stream>>>(
          static_cast<const From*>(in), static_cast<To*>(out), numel);
    });
  });
  if (!known_in || !known_out) return cudaErrorInvalidValue;
  return numel > 0 ? cudaGetLastError() : cudaSuccess;
}

}  // namespace tensord::core::cuda
