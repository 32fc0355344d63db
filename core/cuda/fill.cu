#include <curand_kernel.h>
#include <math_constants.h>

#include "core/cuda/fill.cuh"
#include "core/cuda/kernel_common.cuh"

namespace tensord::core::cuda {
namespace {

template <typename T>
__global__ void ConstantKernel(double value, T* out, int64_t numel) {
  const T v = FromDouble<T>(value);
  for (int64_t i = GridStart(); i < numel; i += GridStep()) out[i] = v;
}

// arange's element i (scalar::Arange: exact wrapping int64 for integral
// start and step on integer tensors, double otherwise), as the CPU's.
template <typename T>
__global__ void ArangeKernel(scalar::Arange arange, T* out, int64_t numel) {
  for (int64_t i = GridStart(); i < numel; i += GridStep()) {
    out[i] = Store<T>(arange.At<Compute<T>>(i));
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
  const T high = FromDouble<T>(p.high);
  const bool clamp = p.high > p.low;
  for (int64_t g = GridStart(); g < groups; g += GridStep()) {
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
        T x = FromDouble<T>(p.low + (p.high - p.low) * u);
        if (clamp && Load<T>(x) >= Load<T>(high)) x = Below<T>(high);
        out[i] = x;
      } else {
        out[i] = FromDouble<T>(p.mean + p.stddev * v[j]);
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
        RandomKernel<T><<<GridBlocks((numel + kPer - 1) / kPer), kBlockThreads,
                          0, stream>>>(params, dst, numel);
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
            <<<GridBlocks(numel), kBlockThreads, 0, stream>>>(v, dst, numel);
        break;
      }
      case FillKind::kArange:
        ArangeKernel<T><<<GridBlocks(numel), kBlockThreads, 0, stream>>>(
            scalar::Arange::Make(params.start, params.step), dst, numel);
        break;
      default:
        ok = false;
        break;
    }
  });
  if (!known || !ok) return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace tensord::core::cuda
