#include "core/cuda/cast.cuh"
#include "core/cuda/kernel_common.cuh"

namespace tensord::core::cuda {
namespace {

template <typename To, typename From>
__global__ void CastKernel(const From* in, To* out, int64_t numel) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < numel; i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    out[i] = Convert<To, From>(in[i]);
  }
}

}  // namespace

cudaError_t LaunchCast(ElemType in_type, const void* in, ElemType out_type,
                       void* out, int64_t numel, cudaStream_t stream) {
  bool known = true;
  const unsigned int grid = GridFor(numel);
  known =
      DispatchElem(in_type,
                   [&](auto from_tag) {
                     using From = typename decltype(from_tag)::type;
                     known = DispatchElem(out_type, [&](auto to_tag) {
                       using To = typename decltype(to_tag)::type;
                       if (numel > 0) {
                         CastKernel<To, From><<<grid, kThreads, 0, stream>>>(
                             static_cast<const From*>(in),
                             static_cast<To*>(out), numel);
                       }
                     });
                   }) &&
      known;
  if (!known) return cudaErrorInvalidValue;
  return numel > 0 ? cudaGetLastError() : cudaSuccess;
}

}  // namespace tensord::core::cuda
