#include "core/cuda/kernel_common.cuh"
#include "core/cuda/reduce.cuh"

namespace tensord::core::cuda {
namespace {

// The reduction semantics are core/base/scalar_ops.h's (ReduceTerm, ReduceFinish,
// Wins), applied to loaded (compute-type) values.
template <typename T>
using Acc = scalar::SumAccumulator<Compute<T>>;

template <typename T>
__device__ __forceinline__ Acc<T> Term(ReduceOp op, T v) {
  return scalar::ReduceTerm<Compute<T>>(op, Load<T>(v));
}

template <typename T>
__device__ __forceinline__ T Finish(ReduceOp op, Acc<T> acc, int64_t n) {
  return Store<T>(scalar::ReduceFinish<Compute<T>>(op, acc, n));
}

template <typename T>
__device__ __forceinline__ bool Wins(bool min, T v, int64_t i, T b, int64_t j) {
  return scalar::Wins(min, Load<T>(v), i, Load<T>(b), j);
}

template <typename T>
__device__ __forceinline__ void WriteOut(ReduceOp op, void* out, int64_t dst,
                                         T best, int64_t best_index) {
  if (op == ReduceOp::kArgmax) {
    static_cast<int64_t*>(out)[dst] = best_index;
  } else {
    static_cast<T*>(out)[dst] = best;
  }
}

// inner == 1: one block per row of n contiguous elements.
template <typename T>
__global__ void RowReduceKernel(ReduceOp op, const T* in, void* out,
                                int64_t outer, int64_t n) {
  __shared__ Acc<T> acc_s[kBlockThreads];
  __shared__ int64_t idx_s[kBlockThreads];
  // Raw storage: __half has a constructor, which __shared__ forbids.
  __shared__ alignas(8) unsigned char val_raw[kBlockThreads * sizeof(T)];
  T* val_s = reinterpret_cast<T*>(val_raw);
  const bool sum_like = scalar::IsSumLike(op);
  const bool min = op == ReduceOp::kMin;
  for (int64_t row = blockIdx.x; row < outer; row += gridDim.x) {
    const T* p = in + row * n;
    if (sum_like) {
      Acc<T> acc = 0;
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        acc += Term(op, p[j]);
      acc_s[threadIdx.x] = acc;
    } else {
      int64_t best = -1;
      T bv{};
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        if (best < 0 || Wins(min, p[j], j, bv, best)) {
          best = j;
          bv = p[j];
        }
      }
      val_s[threadIdx.x] = bv;
      idx_s[threadIdx.x] = best;
    }
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) {
        const int o = threadIdx.x + s;
        if (sum_like) {
          acc_s[threadIdx.x] += acc_s[o];
        } else if (idx_s[o] >= 0 &&
                   (idx_s[threadIdx.x] < 0 ||
                    Wins(min, val_s[o], idx_s[o], val_s[threadIdx.x],
                         idx_s[threadIdx.x]))) {
          val_s[threadIdx.x] = val_s[o];
          idx_s[threadIdx.x] = idx_s[o];
        }
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      if (sum_like) {
        static_cast<T*>(out)[row] = Finish<T>(op, acc_s[0], n);
      } else {
        WriteOut<T>(op, out, row, val_s[0], idx_s[0]);
      }
    }
    __syncthreads();
  }
}

// inner > 1: one thread per output; neighbouring threads read neighbouring
// elements.
template <typename T>
__global__ void StridedReduceKernel(ReduceOp op, const T* in, void* out,
                                    int64_t outer, int64_t n, int64_t inner) {
  const int64_t total = outer * inner;
  const bool sum_like = scalar::IsSumLike(op);
  const bool min = op == ReduceOp::kMin;
  for (int64_t t = GridStart(); t < total; t += GridStep()) {
    const int64_t o = t / inner, i = t % inner;
    const T* p = in + o * n * inner + i;
    if (sum_like) {
      Acc<T> acc = 0;
      for (int64_t j = 0; j < n; ++j) acc += Term(op, p[j * inner]);
      static_cast<T*>(out)[t] = Finish<T>(op, acc, n);
    } else {
      int64_t best = 0;
      for (int64_t j = 1; j < n; ++j) {
        if (Wins(min, p[j * inner], j, p[best * inner], best)) best = j;
      }
      WriteOut<T>(op, out, t, p[best * inner], best);
    }
  }
}

}  // namespace

cudaError_t LaunchReduce(ReduceOp op, ElemType type, int64_t outer, int64_t n,
                         int64_t inner, const void* in, void* out,
                         cudaStream_t stream) {
  if (n == 0 && !scalar::IsSumLike(op)) return cudaErrorInvalidValue;
  bool defined = false;
  const bool known = DispatchElem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (!scalar::ReduceDefined<Compute<T>>(op)) return;
    defined = true;
    if (outer <= 0 || inner <= 0) return;
    const T* src = static_cast<const T*>(in);
    if (inner == 1) {
      const unsigned int grid = static_cast<unsigned int>(
          outer < kMaxGridBlocks ? outer : kMaxGridBlocks);
      RowReduceKernel<T>
          <<<grid, kBlockThreads, 0, stream>>>(op, src, out, outer, n);
    } else {
      StridedReduceKernel<T>
          <<<GridBlocks(outer * inner), kBlockThreads, 0, stream>>>(
              op, src, out, outer, n, inner);
    }
  });
  if (!known || !defined) return cudaErrorInvalidValue;
  return outer > 0 && inner > 0 ? cudaGetLastError() : cudaSuccess;
}

}  // namespace tensord::core::cuda
