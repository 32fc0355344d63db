#include "core/cuda/binary.cuh"
#include "core/cuda/kernel_common.cuh"

namespace tensord::core::cuda {
namespace {

__device__ __forceinline__ void Offsets(const BroadcastIndex& idx, int64_t i,
                                        int64_t* ia, int64_t* ib) {
  int64_t oa = 0, ob = 0;
  for (int d = idx.rank - 1; d >= 0; --d) {
    const int64_t c = i % idx.dims[d];
    i /= idx.dims[d];
    oa += c * idx.a_strides[d];
    ob += c * idx.b_strides[d];
  }
  *ia = oa;
  *ib = ob;
}

// out[i] = fn(a[.], b[.]) in T's compute type; Out is T, or Bool8 for the
// comparisons.
template <typename Fn, typename T, typename Out>
__global__ void BinaryKernel(Fn fn, const T* a, const T* b, Out* out,
                             int64_t numel, bool contiguous,
                             BroadcastIndex idx) {
  for (int64_t i = GridStart(); i < numel; i += GridStep()) {
    int64_t ia = i, ib = i;
    if (!contiguous) Offsets(idx, i, &ia, &ib);
    if constexpr (Fn::kComparison) {
      out[i] = fn(Load<T>(a[ia]), Load<T>(b[ib]));
    } else {
      out[i] = Store<T>(fn(Load<T>(a[ia]), Load<T>(b[ib])));
    }
  }
}

}  // namespace

cudaError_t LaunchBinary(BinaryOp op, ElemType type, const void* a,
                         const void* b, void* out, int64_t numel,
                         bool contiguous, const BroadcastIndex& index,
                         cudaStream_t stream) {
  bool defined = false;
  const bool known = DispatchElem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    scalar::VisitBinaryOp(op, [&](auto fn) {
      using Fn = decltype(fn);
      if constexpr (Fn::template kDefined<Compute<T>>) {
        defined = true;
        if (numel <= 0) return;
        using Out = std::conditional_t<Fn::kComparison, Bool8, T>;
        BinaryKernel<Fn, T, Out>
            <<<GridBlocks(numel), kBlockThreads, 0, stream>>>(
                fn, static_cast<const T*>(a), static_cast<const T*>(b),
                static_cast<Out*>(out), numel, contiguous, index);
      }
    });
  });
  if (!known || !defined) return cudaErrorInvalidValue;
  return numel > 0 ? cudaGetLastError() : cudaSuccess;
}

}  // namespace tensord::core::cuda
