#include "core/cpu/pool_kernels.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/base/dispatch.h"
#include "core/base/op_checks.h"

namespace tensord::core::cpu {
namespace {

// One output row's or column's window along an axis: the input indices
// [begin, end) it reads (step `step`), and for average pooling the
// window's size clipped to the padded input.
struct Span {
  int64_t begin = 0, end = 0, step = 1, padded = 0;
};

// ATen's max_pool2d: the window's first element inside the input, its end
// clipped; the start stepped past the padding by the dilation.
std::vector<Span> MaxSpans(int64_t out, int64_t in, int64_t k, int64_t s,
                           int64_t p, int64_t d) {
  std::vector<Span> spans(out);
  for (int64_t o = 0; o < out; ++o) {
    int64_t begin = o * s - p;
    const int64_t end = std::min(begin + (k - 1) * d + 1, in);
    while (begin < 0) begin += d;
    spans[o] = {begin, end, d, 0};
  }
  return spans;
}

// ATen's avg_pool2d: the window clipped to the padded input (its size, the
// divisor counting padding), then to the input.
std::vector<Span> AvgSpans(int64_t out, int64_t in, int64_t k, int64_t s,
                           int64_t p) {
  std::vector<Span> spans(out);
  for (int64_t o = 0; o < out; ++o) {
    const int64_t begin = o * s - p;
    const int64_t end = std::min(begin + k, in + p);
    spans[o] = {std::max<int64_t>(begin, 0), std::min(end, in), 1, end - begin};
  }
  return spans;
}

// ATen's comparison: a greater value, or any NaN, replaces the maximum.
template <typename C>
inline bool Beats(C v, C best) {
  return v > best || v != v;
}

// The output columns [lo, hi) whose windows lie wholly inside the input
// along the row: the ones a plain strided loop serves.
struct Interior {
  int64_t lo = 0, hi = 0;
};
Interior InteriorColumns(const WindowDims& d) {
  Interior in;
  in.lo = std::min(d.ow, (d.pw + d.sw - 1) / d.sw);
  const int64_t span = (d.kw - 1) * d.dw + 1;
  // The last q with q * sw - pw + span <= w.
  const int64_t last = d.w + d.pw - span;
  in.hi = last < 0 ? 0 : std::min(d.ow, last / d.sw + 1);
  if (in.hi < in.lo) in.hi = in.lo;
  return in;
}

// One output row of max pooling: acc[q] the running maximum of output
// column q and (kIndex) at[q] its flat index in the plane, fed the
// window's elements in row-major order, as ATen's loop reads them.
template <bool kIndex, typename T>
void MaxRow(const WindowDims& d, const Span& rs, const std::vector<Span>& cols,
            const Interior& interior, const T* xp, Compute<T>* acc,
            int64_t* at) {
  using C = Compute<T>;
  for (int64_t q = 0; q < d.ow; ++q) {
    acc[q] = -std::numeric_limits<C>::infinity();
    if constexpr (kIndex) at[q] = rs.begin * d.w + cols[q].begin;
  }
  for (int64_t i = rs.begin; i < rs.end; i += rs.step) {
    const T* row = xp + i * d.w;
    for (int64_t j = 0; j < d.kw; ++j) {
      const int64_t offset = j * d.dw - d.pw;
      const T* base = row + offset;
      for (int64_t q = interior.lo; q < interior.hi; ++q) {
        const C v = Load(base[q * d.sw]);
        const bool beats = Beats(v, acc[q]);  // selects, no branch
        if constexpr (kIndex) {
          at[q] = beats ? i * d.w + q * d.sw + offset : at[q];
        }
        acc[q] = beats ? v : acc[q];
      }
    }
    auto edge = [&](int64_t q) {
      const Span& cs = cols[q];
      for (int64_t j = cs.begin; j < cs.end; j += cs.step) {
        const C v = Load(row[j]);
        if (Beats(v, acc[q])) {
          acc[q] = v;
          if constexpr (kIndex) at[q] = i * d.w + j;
        }
      }
    };
    for (int64_t q = 0; q < interior.lo; ++q) edge(q);
    for (int64_t q = interior.hi; q < d.ow; ++q) edge(q);
  }
}

template <typename T>
void MaxPool(const WindowDims& d, PoolPass pass, const T* in, const T* x,
             T* out) {
  using C = Compute<T>;
  const std::vector<Span> rows = MaxSpans(d.oh, d.h, d.kh, d.sh, d.ph, d.dh);
  const std::vector<Span> cols = MaxSpans(d.ow, d.w, d.kw, d.sw, d.pw, d.dw);
  const Interior interior = InteriorColumns(d);
  const int64_t plane = d.h * d.w, out_plane = d.oh * d.ow;
  std::vector<C> acc(d.ow);
  std::vector<int64_t> at(d.ow);
  if (pass == PoolPass::kForward) {
    for (int64_t p = 0; p < d.n * d.c; ++p) {
      for (int64_t r = 0; r < d.oh; ++r) {
        MaxRow<false>(d, rows[r], cols, interior, in + p * plane, acc.data(),
                      at.data());
        T* op = out + p * out_plane + r * d.ow;
        for (int64_t q = 0; q < d.ow; ++q) op[q] = Store<T>(acc[q]);
      }
    }
    return;
  }
  // The gradient to each window's maximum, found again in x.
  std::fill(out, out + d.n * d.c * plane, Store<T>(C(0)));
  for (int64_t p = 0; p < d.n * d.c; ++p) {
    T* gx = out + p * plane;
    for (int64_t r = 0; r < d.oh; ++r) {
      MaxRow<true>(d, rows[r], cols, interior, x + p * plane, acc.data(),
                   at.data());
      const T* g = in + p * out_plane + r * d.ow;
      for (int64_t q = 0; q < d.ow; ++q) {
        gx[at[q]] = Store<T>(Load(gx[at[q]]) + Load(g[q]));
      }
    }
  }
}

template <typename T>
void AvgPool(const WindowDims& d, bool count_padding, PoolPass pass,
             const T* in, T* out) {
  using C = Compute<T>;
  const std::vector<Span> rows = AvgSpans(d.oh, d.h, d.kh, d.sh, d.ph);
  const std::vector<Span> cols = AvgSpans(d.ow, d.w, d.kw, d.sw, d.pw);
  const int64_t plane = d.h * d.w, out_plane = d.oh * d.ow;
  const bool forward = pass == PoolPass::kForward;
  if (!forward) std::fill(out, out + d.n * d.c * plane, Store<T>(C(0)));
  for (int64_t p = 0; p < d.n * d.c; ++p) {
    T* op = out + (forward ? p * out_plane : p * plane);
    const T* ip = in + (forward ? p * plane : p * out_plane);
    for (int64_t r = 0; r < d.oh; ++r) {
      const Span& rs = rows[r];
      for (int64_t q = 0; q < d.ow; ++q) {
        const Span& cs = cols[q];
        const int64_t inside = (rs.end - rs.begin) * (cs.end - cs.begin);
        if (rs.begin >= rs.end || cs.begin >= cs.end) {
          if (forward) op[r * d.ow + q] = Store<T>(C(0));
          continue;
        }
        const C divisor =
            static_cast<C>(count_padding ? rs.padded * cs.padded : inside);
        if (forward) {
          C sum = 0;
          for (int64_t i = rs.begin; i < rs.end; ++i) {
            const T* row = ip + i * d.w;
            for (int64_t j = cs.begin; j < cs.end; ++j) sum += Load(row[j]);
          }
          op[r * d.ow + q] = Store<T>(sum / divisor);
        } else {
          const C share = Load(ip[r * d.ow + q]) / divisor;
          for (int64_t i = rs.begin; i < rs.end; ++i) {
            T* row = op + i * d.w;
            for (int64_t j = cs.begin; j < cs.end; ++j) {
              row[j] = Store<T>(Load(row[j]) + share);
            }
          }
        }
      }
    }
  }
}

}  // namespace

absl::Status Pool2dKernel(const Pool2dArgs& args, DType dtype, const void* in,
                          const void* x, void* out) {
  return DispatchDType(dtype, [&]<typename T>() -> absl::Status {
    if constexpr (!std::is_floating_point_v<Compute<T>>) {
      return NotImplementedError("pool2d", dtype, "cpu");
    } else {
      const T* src = static_cast<const T*>(in);
      T* dst = static_cast<T*>(out);
      if (args.algorithm == PoolAlgorithm::kMax) {
        MaxPool(args.dims, args.pass, src, static_cast<const T*>(x), dst);
      } else {
        AvgPool(args.dims, args.algorithm == PoolAlgorithm::kAvgIncludePad,
                args.pass, src, dst);
      }
      return absl::OkStatus();
    }
  });
}

}  // namespace tensord::core::cpu
