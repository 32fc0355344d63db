#include "core/cuda/kernel_common.cuh"
#include "core/cuda/unary.cuh"

namespace tensord::core::cuda {
namespace {

// Single precision in float (as std::exp(float) on the CPU), double in
// double.
__device__ __forceinline__ float MathAbs(float x) { return fabsf(x); }
__device__ __forceinline__ double MathAbs(double x) { return fabs(x); }
__device__ __forceinline__ float MathExp(float x) { return expf(x); }
__device__ __forceinline__ double MathExp(double x) { return exp(x); }
__device__ __forceinline__ float MathLog(float x) { return logf(x); }
__device__ __forceinline__ double MathLog(double x) { return log(x); }
__device__ __forceinline__ float MathSqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double MathSqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float MathTanh(float x) { return tanhf(x); }
__device__ __forceinline__ double MathTanh(double x) { return tanh(x); }

template <typename T>
__device__ __forceinline__ T Apply(UnOp op, T v) {
  using C = Compute<T>;
  const C x = Load<T>(v);
  if constexpr (kIsIntType<T>) {
    using U = Unsigned<T>;
    switch (op) {
      case UnOp::kNeg:
        return static_cast<T>(U(0) - static_cast<U>(x));
      case UnOp::kAbs:
        return x < 0 ? static_cast<T>(U(0) - static_cast<U>(x)) : x;
      case UnOp::kRelu:
        return x > 0 ? x : 0;
      default:
        return x;  // floating ops are excluded by the launcher
    }
  } else {
    C r = x;
    switch (op) {
      case UnOp::kNeg:
        r = -x;
        break;
      case UnOp::kAbs:
        r = MathAbs(x);
        break;
      case UnOp::kRelu:
        r = x > C(0) ? x : C(0);
        break;
      case UnOp::kExp:
        r = MathExp(x);
        break;
      case UnOp::kLog:
        r = MathLog(x);
        break;
      case UnOp::kSqrt:
        r = MathSqrt(x);
        break;
      case UnOp::kSigmoid:
        r = C(1) / (C(1) + MathExp(-x));
        break;
      case UnOp::kTanh:
        r = MathTanh(x);
        break;
    }
    return Store<T>(r);
  }
}

template <typename T>
__global__ void UnaryKernel(UnOp op, const T* in, T* out, int64_t numel) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < numel; i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    out[i] = Apply<T>(op, in[i]);
  }
}

bool IsFloatingOp(UnOp op) {
  return op == UnOp::kExp || op == UnOp::kLog || op == UnOp::kSqrt ||
         op == UnOp::kSigmoid || op == UnOp::kTanh;
}

}  // namespace

cudaError_t LaunchUnary(UnOp op, ElemType type, const void* in, void* out,
                        int64_t numel, cudaStream_t stream) {
  if (static_cast<int>(op) < 0 || static_cast<int>(op) > 7) {
    return cudaErrorInvalidValue;
  }
  if (type == ElemType::kBool) return cudaErrorInvalidValue;
  const bool is_int = type == ElemType::kI32 || type == ElemType::kI64;
  if (is_int && IsFloatingOp(op)) return cudaErrorInvalidValue;
  if (numel <= 0) return cudaSuccess;
  const unsigned int grid = GridFor(numel);
  bool launched = false;
  DispatchElem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!kIsBoolType<T>) {
      UnaryKernel<T><<<grid, kThreads, 0, stream>>>(
          op, static_cast<const T*>(in), static_cast<T*>(out), numel);
      launched = true;
    }
  });
  if (!launched) return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace tensord::core::cuda
