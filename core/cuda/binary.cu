#include "core/cuda/binary.cuh"
#include "core/cuda/kernel_common.cuh"

namespace tensord::core::cuda {
namespace {

template <typename T>
__device__ __forceinline__ T Arith(BinOp op, T xs, T ys) {
  using C = Compute<T>;
  const C x = Load<T>(xs), y = Load<T>(ys);
  if constexpr (kIsBoolType<T>) {
    switch (op) {
      case BinOp::kAdd:
        return (x != 0 || y != 0) ? 1 : 0;
      case BinOp::kMul:
        return (x != 0 && y != 0) ? 1 : 0;
      case BinOp::kMaximum:
        return x < y ? y : x;
      case BinOp::kMinimum:
        return y < x ? y : x;
      default:
        return 0;  // excluded by the launcher
    }
  } else if constexpr (kIsIntType<T>) {
    using U = Unsigned<T>;
    switch (op) {
      case BinOp::kAdd:
        return static_cast<T>(static_cast<U>(x) + static_cast<U>(y));
      case BinOp::kSub:
        return static_cast<T>(static_cast<U>(x) - static_cast<U>(y));
      case BinOp::kMul:
        return static_cast<T>(static_cast<U>(x) * static_cast<U>(y));
      case BinOp::kMaximum:
        return x < y ? y : x;
      case BinOp::kMinimum:
        return y < x ? y : x;
      case BinOp::kPow: {
        // PyTorch's integer pow: by squaring, wrapping; a negative exponent
        // gives 0 except for bases 1 and -1.
        if (y < 0) {
          if (x == 1) return 1;
          if (x == -1) return (y % 2 == 0) ? 1 : -1;
          return 0;
        }
        U result = 1, base = static_cast<U>(x);
        for (U e = static_cast<U>(y); e != 0; e >>= 1) {
          if (e & 1) result *= base;
          base *= base;
        }
        return static_cast<T>(result);
      }
      default:
        return 0;  // div is excluded by the launcher
    }
  } else {
    C r = 0;
    switch (op) {
      case BinOp::kAdd:
        r = x + y;
        break;
      case BinOp::kSub:
        r = x - y;
        break;
      case BinOp::kMul:
        r = x * y;
        break;
      case BinOp::kDiv:
        r = x / y;
        break;
      case BinOp::kMaximum:  // NaN propagates
        r = (x != x || y != y) ? x + y : (x < y ? y : x);
        break;
      case BinOp::kMinimum:
        r = (x != x || y != y) ? x + y : (y < x ? y : x);
        break;
      case BinOp::kPow:
        if constexpr (std::is_same_v<C, float>) {
          r = powf(x, y);
        } else {
          r = pow(x, y);
        }
        break;
      default:
        break;
    }
    return Store<T>(r);
  }
}

template <typename T>
__device__ __forceinline__ Bool8 Compare(BinOp op, T xs, T ys) {
  const Compute<T> x = Load<T>(xs), y = Load<T>(ys);
  switch (op) {
    case BinOp::kEq:
      return x == y;
    case BinOp::kNe:
      return x != y;
    case BinOp::kLt:
      return x < y;
    case BinOp::kLe:
      return x <= y;
    case BinOp::kGt:
      return x > y;
    case BinOp::kGe:
      return x >= y;
    default:
      return 0;
  }
}

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

template <typename T, bool kCompare>
__global__ void BinaryKernel(BinOp op, const T* a, const T* b,
                             std::conditional_t<kCompare, Bool8, T>* out,
                             int64_t numel, bool contiguous,
                             BroadcastIndex idx) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < numel; i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    int64_t ia = i, ib = i;
    if (!contiguous) Offsets(idx, i, &ia, &ib);
    if constexpr (kCompare) {
      out[i] = Compare<T>(op, a[ia], b[ib]);
    } else {
      out[i] = Arith<T>(op, a[ia], b[ib]);
    }
  }
}

bool IsCompare(BinOp op) {
  return op == BinOp::kEq || op == BinOp::kNe || op == BinOp::kLt ||
         op == BinOp::kLe || op == BinOp::kGt || op == BinOp::kGe;
}

}  // namespace

cudaError_t LaunchBinary(BinOp op, ElemType type, const void* a, const void* b,
                         void* out, int64_t numel, bool contiguous,
                         const BroadcastIndex& index, cudaStream_t stream) {
  if (static_cast<int>(op) < 0 || static_cast<int>(op) > 12) {
    return cudaErrorInvalidValue;
  }
  const bool compare = IsCompare(op);
  const bool is_bool = type == ElemType::kBool;
  const bool is_int = type == ElemType::kI32 || type == ElemType::kI64;
  if (is_bool && (op == BinOp::kSub || op == BinOp::kPow)) {
    return cudaErrorInvalidValue;
  }
  if ((is_bool || is_int) && op == BinOp::kDiv) return cudaErrorInvalidValue;
  if (numel <= 0) return cudaSuccess;
  const unsigned int grid = GridFor(numel);
  const bool known = DispatchElem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pa = static_cast<const T*>(a);
    const T* pb = static_cast<const T*>(b);
    if (compare) {
      BinaryKernel<T, true><<<grid, kThreads, 0, stream>>>(
          op, pa, pb, static_cast<Bool8*>(out), numel, contiguous, index);
    } else {
      BinaryKernel<T, false><<<grid, kThreads, 0, stream>>>(
          op, pa, pb, static_cast<T*>(out), numel, contiguous, index);
    }
  });
  if (!known) return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace tensord::core::cuda
