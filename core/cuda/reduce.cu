#include "core/cuda/kernel_common.cuh"
#include "core/cuda/reduce.cuh"

namespace tensord::core::cuda {
namespace {

// Accumulator of the sum-like ops: double for floating, int64 wrapping
// (as uint64) for integers and bool.
template <typename T>
using Acc = std::conditional_t<kIsFloatType<T>, double, uint64_t>;

template <typename T>
__device__ __forceinline__ Acc<T> Term(RedOp op, T v) {
  if constexpr (kIsFloatType<T>) {
    const double x = static_cast<double>(Load<T>(v));
    return op == RedOp::kNorm ? x * x : x;
  } else {
    return static_cast<uint64_t>(static_cast<int64_t>(v));
  }
}

template <typename T>
__device__ __forceinline__ T Finish(RedOp op, Acc<T> acc, int64_t n) {
  if constexpr (kIsFloatType<T>) {
    const double r = op == RedOp::kNorm   ? sqrt(acc)
                     : op == RedOp::kMean ? acc / static_cast<double>(n)
                                          : acc;
    return Convert<T, double>(r);
  } else {
    return static_cast<T>(static_cast<int64_t>(acc));
  }
}

// x > y with NaN greater than everything.
template <typename T>
__device__ __forceinline__ bool Greater(T xs, T ys) {
  const Compute<T> x = Load<T>(xs), y = Load<T>(ys);
  if constexpr (kIsFloatType<T>) {
    if (x != x) return y == y;
    if (y != y) return false;
  }
  return x > y;
}

// Whether candidate (v, i) wins over (b, j) for max/argmax (min when
// `min`): strictly better, or equal (neither better) with a smaller index.
template <typename T>
__device__ __forceinline__ bool Wins(bool min, T v, int64_t i, T b, int64_t j) {
  const bool better = min ? Greater(b, v) : Greater(v, b);
  const bool worse = min ? Greater(v, b) : Greater(b, v);
  return better || (!worse && i < j);
}

template <typename T>
__device__ __forceinline__ void WriteOut(RedOp op, void* out, int64_t dst,
                                         T best, int64_t best_index) {
  if (op == RedOp::kArgmax) {
    static_cast<int64_t*>(out)[dst] = best_index;
  } else {
    static_cast<T*>(out)[dst] = best;
  }
}

bool SumLike(RedOp op) {
  return op == RedOp::kSum || op == RedOp::kMean || op == RedOp::kNorm;
}

// inner == 1: one block per row of n contiguous elements.
template <typename T>
__global__ void RowReduceKernel(RedOp op, const T* in, void* out, int64_t outer,
                                int64_t n) {
  __shared__ Acc<T> acc_s[kThreads];
  __shared__ int64_t idx_s[kThreads];
  // Raw storage: __half has a constructor, which __shared__ forbids.
  __shared__ alignas(8) unsigned char val_raw[kThreads * sizeof(T)];
  T* val_s = reinterpret_cast<T*>(val_raw);
  const bool sum_like =
      op == RedOp::kSum || op == RedOp::kMean || op == RedOp::kNorm;
  const bool min = op == RedOp::kMin;
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
__global__ void StridedReduceKernel(RedOp op, const T* in, void* out,
                                    int64_t outer, int64_t n, int64_t inner) {
  const int64_t total = outer * inner;
  const bool sum_like =
      op == RedOp::kSum || op == RedOp::kMean || op == RedOp::kNorm;
  const bool min = op == RedOp::kMin;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       t < total; t += static_cast<int64_t>(blockDim.x) * gridDim.x) {
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

cudaError_t LaunchReduce(RedOp op, ElemType type, int64_t outer, int64_t n,
                         int64_t inner, const void* in, void* out,
                         cudaStream_t stream) {
  if (static_cast<int>(op) < 0 || static_cast<int>(op) > 5) {
    return cudaErrorInvalidValue;
  }
  const bool floating = type == ElemType::kF32 || type == ElemType::kF64 ||
                        type == ElemType::kF16 || type == ElemType::kBF16;
  if (!floating && (op == RedOp::kMean || op == RedOp::kNorm)) {
    return cudaErrorInvalidValue;
  }
  if (n == 0 && !SumLike(op)) return cudaErrorInvalidValue;
  if (outer <= 0 || inner <= 0) return cudaSuccess;
  const bool known = DispatchElem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = static_cast<const T*>(in);
    if (inner == 1) {
      const unsigned int grid =
          static_cast<unsigned int>(outer < (1 << 20) ? outer : (1 << 20));
      RowReduceKernel<T><<<grid, kThreads, 0, stream>>>(op, src, out, outer, n);
    } else {
      StridedReduceKernel<T><<<GridFor(outer * inner), kThreads, 0, stream>>>(
          op, src, out, outer, n, inner);
    }
  });
  if (!known) return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace tensord::core::cuda
