#include "core/cuda/kernel_common.cuh"
#include "core/cuda/unary.cuh"

namespace tensord::core::cuda {
namespace {

// out[i] = fn(in[i]) in T's compute type.
template <typename Fn, typename T>
__global__ void UnaryKernel(Fn fn, const T* in, T* out, int64_t numel) {
  for (int64_t i = GridStart(); i < numel; i += GridStep()) {
    out[i] = Store<T>(fn(Load<T>(in[i])));
  }
}

}  // namespace

cudaError_t LaunchUnary(UnaryOp op, double alpha, double beta, ElemType type,
                        const void* in, void* out, int64_t numel,
                        cudaStream_t stream) {
  bool defined = false;
  const bool known = DispatchElem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    scalar::VisitUnaryOp(op, alpha, beta, [&](auto fn) {
      using Fn = decltype(fn);
      if constexpr (Fn::template kDefined<Compute<T>>) {
        defined = true;
        if (numel <= 0) return;
        UnaryKernel<Fn, T><<<GridBlocks(numel), kBlockThreads, 0, stream>>>(
            fn, static_cast<const T*>(in), static_cast<T*>(out), numel);
      }
    });
  });
  if (!known || !defined) return cudaErrorInvalidValue;
  return numel > 0 ? cudaGetLastError() : cudaSuccess;
}

}  // namespace tensord::core::cuda
