#include "core/cpu/norm_kernels.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "core/base/absl_compat.h"

namespace tensord::core::cpu {
namespace {

// x[b, ch, :] for each image b: `visit(row, count)` over the channel's rows.
template <typename T, typename Visit>
void ForChannel(const BatchNormArgs& a, const T* x, int64_t ch, Visit visit) {
  for (int64_t b = 0; b < a.n; ++b) {
    visit(x + (b * a.c + ch) * a.plane, b);
  }
}

template <typename T>
void Statistics(const BatchNormArgs& a, const T* x, T* stats) {
  const double count = static_cast<double>(a.n * a.plane);
  for (int64_t ch = 0; ch < a.c; ++ch) {
    double sum = 0;
    ForChannel(a, x, ch, [&](const T* row, int64_t) {
      for (int64_t i = 0; i < a.plane; ++i) sum += static_cast<double>(row[i]);
    });
    const T mean = static_cast<T>(sum / count);
    double squares = 0;
    ForChannel(a, x, ch, [&](const T* row, int64_t) {
      for (int64_t i = 0; i < a.plane; ++i) {
        const T centred = row[i] - mean;
        squares += static_cast<double>(centred * centred);
      }
    });
    const T var = static_cast<T>(squares / count);
    const T root = std::sqrt(var + static_cast<T>(a.eps));
    stats[ch] = mean;
    stats[a.c + ch] = var;
    stats[2 * a.c + ch] = T(1) / root;
  }
}

template <typename T>
void Normalize(const BatchNormArgs& a, const T* x, const T* stats,
               const T* weight, const T* bias, T* y) {
  for (int64_t ch = 0; ch < a.c; ++ch) {
    const T mean = stats[ch], invstd = stats[2 * a.c + ch];
    const T w = a.weight ? weight[ch] : T(1), b = a.bias ? bias[ch] : T(0);
    ForChannel(a, x, ch, [&](const T* row, int64_t image) {
      T* dst = y + (image * a.c + ch) * a.plane;
      // The composed path's steps, each rounded to T: * weight and + bias
      // only when given (x * 1 and x + 0 would round the same; skipped).
      if (a.weight && a.bias) {
        for (int64_t i = 0; i < a.plane; ++i) {
          dst[i] = (row[i] - mean) * invstd * w + b;
        }
      } else if (a.weight) {
        for (int64_t i = 0; i < a.plane; ++i) {
          dst[i] = (row[i] - mean) * invstd * w;
        }
      } else if (a.bias) {
        for (int64_t i = 0; i < a.plane; ++i) {
          dst[i] = (row[i] - mean) * invstd + b;
        }
      } else {
        for (int64_t i = 0; i < a.plane; ++i) dst[i] = (row[i] - mean) * invstd;
      }
    });
  }
}

template <typename T>
void ParamGrads(const BatchNormArgs& a, const T* x, const T* g, const T* stats,
                T* sums) {
  for (int64_t ch = 0; ch < a.c; ++ch) {
    const T mean = stats[ch], invstd = stats[2 * a.c + ch];
    double g_xhat = 0, g_sum = 0;
    ForChannel(a, x, ch, [&](const T* row, int64_t image) {
      const T* grow = g + (image * a.c + ch) * a.plane;
      for (int64_t i = 0; i < a.plane; ++i) {
        const T xhat = (row[i] - mean) * invstd;
        g_xhat += static_cast<double>(grow[i] * xhat);
        g_sum += static_cast<double>(grow[i]);
      }
    });
    sums[ch] = static_cast<T>(g_xhat);
    sums[a.c + ch] = static_cast<T>(g_sum);
  }
}

template <typename T>
void InputGrad(const BatchNormArgs& a, const T* x, const T* g, const T* stats,
               const T* sums, const T* weight, T* gx) {
  const double count = static_cast<double>(a.n * a.plane);
  for (int64_t ch = 0; ch < a.c; ++ch) {
    const T mean = stats[ch], invstd = stats[2 * a.c + ch];
    const T w = a.weight ? weight[ch] : T(1);
    // mean(gh) and mean(gh * xhat), gh = g * w: w times g's.
    const T gh_mean = static_cast<T>(
        static_cast<double>(w) * static_cast<double>(sums[a.c + ch]) / count);
    const T proj = static_cast<T>(static_cast<double>(w) *
                                  static_cast<double>(sums[ch]) / count);
    ForChannel(a, x, ch, [&](const T* row, int64_t image) {
      const int64_t at = (image * a.c + ch) * a.plane;
      const T* grow = g + at;
      T* dst = gx + at;
      for (int64_t i = 0; i < a.plane; ++i) {
        const T xhat = (row[i] - mean) * invstd;
        const T gh = a.weight ? grow[i] * w : grow[i];
        dst[i] = ((gh - gh_mean) - xhat * proj) * invstd;
      }
    });
  }
}

template <typename T>
void Run(const BatchNormArgs& a, std::span<const void* const> in, void* out) {
  const T* x = static_cast<const T*>(in[0]);
  auto at = [&](int k) { return static_cast<const T*>(in[k]); };
  T* dst = static_cast<T*>(out);
  switch (a.pass) {
    case BatchNormPass::kStatistics:
      Statistics<T>(a, x, dst);
      return;
    case BatchNormPass::kNormalize:
      Normalize<T>(a, x, at(1), at(2), at(3), dst);
      return;
    case BatchNormPass::kParamGrads:
      ParamGrads<T>(a, x, at(1), at(2), dst);
      return;
    case BatchNormPass::kInputGrad:
      InputGrad<T>(a, x, at(1), at(2), at(3), at(4), dst);
      return;
  }
}

}  // namespace

absl::Status BatchNormKernel(const BatchNormArgs& args, DType dtype,
                             std::span<const void* const> in, void* out) {
  if (in.size() != 5) {
    return absl::InternalError(
        absl::StrCat("batch_norm kernel: ", in.size(), " operands of 5"));
  }
  switch (dtype) {
    case DType::kFloat32:
      Run<float>(args, in, out);
      return absl::OkStatus();
    case DType::kFloat64:
      Run<double>(args, in, out);
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("batch_norm kernel: ", ToAbsl(DTypeName(dtype)),
                       " is not a dtype it runs (float32, float64)"));
  }
}

}  // namespace tensord::core::cpu
