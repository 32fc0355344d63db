#include <curand_kernel.h>
#include <math_constants.h>

#include <cmath>

#include "core/cuda/fill.cuh"
#include "core/cuda/kernel_common.cuh"

namespace tensord::core::cuda {
namespace {

template <typename T>
__global__ void ConstantKernel(double value, T* out, int64_t numel) {
  const T v = Convert<T, double>(value);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < numel; i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    out[i] = v;
  }
}

template <typename T>
__global__ void ArangeKernel(double start, double step, bool exact,
                             uint64_t istart, uint64_t istep, T* out,
                             int64_t numel) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < numel; i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    if constexpr (kIsIntType<T>) {
      if (exact) {
        out[i] = static_cast<T>(
            static_cast<int64_t>(istart + static_cast<uint64_t>(i) * istep));
        continue;
      }
    }
    out[i] = Convert<T, double>(start + static_cast<double>(i) * step);
  }
}

// The largest value of T below `high` (std::nextafter(high, low) for
// high > low), for keeping rand's interval half-open after rounding.
template <typename T>
__device__ __forceinline__ T Below(T high) {
  if constexpr (std::is_same_v<T, float>) {
    return nextafterf(high, -CUDART_INF_F);
  } else if constexpr (std::is_same_v<T, double>) {
    return nextafter(high, -CUDART_INF);
  } else {
    // float16 and bfloat16 share the layout sign | exponent | mantissa in
    // 16 bits: one step towards -infinity.
    unsigned short bits;
    memcpy(&bits, &high, sizeof(bits));
    if (bits == 0x0000u) {
      bits = 0x8001u;  // +0 -> the smallest negative subnormal
    } else if (bits & 0x8000u) {
      ++bits;
    } else {
      --bits;
    }
    T r;
    memcpy(&r, &bits, sizeof(bits));
    return r;
  }
}

// Thread g draws from Philox subsequence g: four floats (or two doubles)
// per subsequence, so element i depends only on (seed, i).
template <typename T>
__global__ void RandomKernel(FillParams p, T* out, int64_t numel) {
  constexpr int kPer = std::is_same_v<T, double> ? 2 : 4;
  const int64_t groups = (numel + kPer - 1) / kPer;
  const T high = Convert<T, double>(p.high);
  const bool clamp = p.high > p.low;
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       g < groups; g += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    curandStatePhilox4_32_10_t state;
    curand_init(p.seed, static_cast<unsigned long long>(g), 0, &state);
    double v[4];
    if constexpr (kPer == 2) {
      const double2 d = p.kind == FillKind::kRand
                            ? curand_uniform2_double(&state)
                            : curand_normal2_double(&state);
      v[0] = d.x;
      v[1] = d.y;
    } else {
      const float4 f = p.kind == FillKind::kRand ? curand_uniform4(&state)
                                                 : curand_normal4(&state);
      v[0] = f.x;
      v[1] = f.y;
      v[2] = f.z;
      v[3] = f.w;
    }
    for (int j = 0; j < kPer; ++j) {
      const int64_t i = g * kPer + j;
      if (i >= numel) break;
      if (p.kind == FillKind::kRand) {
        // curand_uniform is in (0, 1]; 1 - u is in [0, 1) like the CPU's.
        const double u = 1.0 - v[j];
        T x = Convert<T, double>(p.low + (p.high - p.low) * u);
        if (clamp && Load<T>(x) >= Load<T>(high)) x = Below<T>(high);
        out[i] = x;
      } else {
        out[i] = Convert<T, double>(p.mean + p.stddev * v[j]);
      }
    }
  }
}

}  // namespace

cudaError_t LaunchFill(const FillParams& params, ElemType type, void* out,
                       int64_t numel, cudaStream_t stream) {
  if (numel <= 0) return cudaSuccess;
  const bool random =
      params.kind == FillKind::kRand || params.kind == FillKind::kRandn;
  bool ok = true;
  const bool known = DispatchElem(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* dst = static_cast<T*>(out);
    if (random) {
      if constexpr (kIsFloatType<T>) {
        constexpr int kPer = std::is_same_v<T, double> ? 2 : 4;
        RandomKernel<T>
            <<<GridFor((numel + kPer - 1) / kPer), kThreads, 0, stream>>>(
                params, dst, numel);
      } else {
        ok = false;
      }
      return;
    }
    switch (params.kind) {
      case FillKind::kZeros:
      case FillKind::kOnes:
      case FillKind::kFull: {
        const double v = params.kind == FillKind::kZeros  ? 0.0
                         : params.kind == FillKind::kOnes ? 1.0
                                                          : params.value;
        ConstantKernel<T>
            <<<GridFor(numel), kThreads, 0, stream>>>(v, dst, numel);
        break;
      }
      case FillKind::kArange: {
        // Integral start and step are exact in wrapping int64 (PyTorch's
        // integer arange); double would lose precision above 2^53.
        const double lim = 0x1.0p62;
        const bool exact = params.start == std::trunc(params.start) &&
                           params.step == std::trunc(params.step) &&
                           std::fabs(params.start) < lim &&
                           std::fabs(params.step) < lim;
        const uint64_t istart =
            exact ? static_cast<uint64_t>(static_cast<int64_t>(params.start))
                  : 0;
        const uint64_t istep =
            exact ? static_cast<uint64_t>(static_cast<int64_t>(params.step))
                  : 0;
        ArangeKernel<T><<<GridFor(numel), kThreads, 0, stream>>>(
            params.start, params.step, exact, istart, istep, dst, numel);
        break;
      }
      default:
        ok = false;
        break;
    }
  });
  if (!known || !ok) return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace tensord::core::cuda
