#include "core/cuda/kernel_common.cuh"
#include "core/cuda/where.cuh"

namespace tensord::core::cuda {
namespace {

template <typename T>
__global__ void WhereKernel(const Bool8* cond, const T* x, const T* y, T* out,
                            int64_t numel, WhereIndex idx) {
  const scalar::Select select;
  for (int64_t i = GridStart(); i < numel; i += GridStep()) {
    int64_t rest = i, oc = 0, ox = 0, oy = 0;
    for (int d = idx.rank - 1; d >= 0; --d) {
      const int64_t c = rest % idx.dims[d];
      rest /= idx.dims[d];
      oc += c * idx.strides[0][d];
      ox += c * idx.strides[1][d];
      oy += c * idx.strides[2][d];
    }
    out[i] = select(cond[oc], x[ox], y[oy]);
  }
}

}  // namespace

cudaError_t LaunchWhere(ElemType type, const void* cond, const void* x,
                        const void* y, void* out, int64_t numel,
                        const WhereIndex& index, cudaStream_t stream) {
  const bool known = DispatchElem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (numel <= 0) return;
    WhereKernel<T><<<GridBlocks(numel), kBlockThreads, 0, stream>>>(
        static_cast<const Bool8*>(cond), static_cast<const T*>(x),
        static_cast<const T*>(y), static_cast<T*>(out), numel, index);
  });
  if (!known) return cudaErrorInvalidValue;
  return numel > 0 ? cudaGetLastError() : cudaSuccess;
}

}  // namespace tensord::core::cuda
