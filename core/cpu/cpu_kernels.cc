#include "core/cpu/cpu_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <random>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/absl_compat.h"
#include "core/cpu/blas_placement.h"
#include "core/cpu/random.h"
#include "core/base/dispatch.h"
#include "core/base/op_checks.h"
#include "core/base/status.h"

namespace tensord::core::cpu {
namespace {

// One element from storage type From to storage type To, through their
// compute types (core/base/scalar_ops.h's Convert).
template <typename To, typename From>
To CastElement(From v) {
  return Store<To>(scalar::Convert<Compute<To>, Compute<From>>(Load(v)));
}

// Sum, mean and norm of a floating type, in double: along a contiguous run
// (inner == 1) in eight independent lanes, which the compiler vectorizes
// where one running sum would wait on each add; across rows (inner > 1) a
// row of sums at a time, reading the input in order. The op is decided
// once per call, not per element.
template <typename T>
void SumFloating(ReduceOp op, const ReduceDims& d, const T* in, T* out) {
  using C = Compute<T>;
  const bool squares = op == ReduceOp::kNorm;
  auto finish = [&](double acc) {
    return Store<T>(scalar::ReduceFinish<C>(op, acc, d.n));
  };
  if (d.inner == 1) {
    for (int64_t o = 0; o < d.outer; ++o) {
      const T* p = in + o * d.n;
      double lanes[8] = {};
      int64_t j = 0;
      if (squares) {
        for (; j + 8 <= d.n; j += 8) {
          for (int k = 0; k < 8; ++k) {
            const double x = static_cast<double>(Load(p[j + k]));
            lanes[k] += x * x;
          }
        }
      } else {
        for (; j + 8 <= d.n; j += 8) {
          for (int k = 0; k < 8; ++k) {
            lanes[k] += static_cast<double>(Load(p[j + k]));
          }
        }
      }
      double acc = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
                   ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
      for (; j < d.n; ++j) {
        const double x = static_cast<double>(Load(p[j]));
        acc += squares ? x * x : x;
      }
      out[o] = finish(acc);
    }
    return;
  }
  std::vector<double> acc(static_cast<size_t>(d.inner));
  for (int64_t o = 0; o < d.outer; ++o) {
    std::fill(acc.begin(), acc.end(), 0.0);
    const T* p = in + o * d.n * d.inner;
    for (int64_t j = 0; j < d.n; ++j) {
      const T* row = p + j * d.inner;
      if (squares) {
        for (int64_t i = 0; i < d.inner; ++i) {
          const double x = static_cast<double>(Load(row[i]));
          acc[i] += x * x;
        }
      } else {
        for (int64_t i = 0; i < d.inner; ++i) {
          acc[i] += static_cast<double>(Load(row[i]));
        }
      }
    }
    for (int64_t i = 0; i < d.inner; ++i) out[o * d.inner + i] = finish(acc[i]);
  }
}

template <typename T>
void ReduceTyped(ReduceOp op, const ReduceDims& d, const T* in, void* out) {
  using C = Compute<T>;
  if constexpr (scalar::kIsFloat<C>) {
    if (scalar::IsSumLike(op)) {
      SumFloating<T>(op, d, in, static_cast<T*>(out));
      return;
    }
  }
  for (int64_t o = 0; o < d.outer; ++o) {
    for (int64_t i = 0; i < d.inner; ++i) {
      const T* p = in + o * d.n * d.inner + i;
      const int64_t dst = o * d.inner + i;
      if (scalar::IsSumLike(op)) {
        scalar::SumAccumulator<C> acc = 0;
        for (int64_t j = 0; j < d.n; ++j) {
          acc += scalar::ReduceTerm<C>(op, Load(p[j * d.inner]));
        }
        static_cast<T*>(out)[dst] =
            Store<T>(scalar::ReduceFinish<C>(op, acc, d.n));
        continue;
      }
      const bool min = op == ReduceOp::kMin;
      int64_t best = 0;
      for (int64_t j = 1; j < d.n; ++j) {
        if (scalar::Wins(min, Load(p[j * d.inner]), j, Load(p[best * d.inner]),
                         best)) {
          best = j;
        }
      }
      if (op == ReduceOp::kArgmax) {
        static_cast<int64_t*>(out)[dst] = best;
      } else {
        static_cast<T*>(out)[dst] = p[best * d.inner];
      }
    }
  }
}

template <typename T>
void FillTyped(const FillSpec& spec, int64_t numel, T* out) {
  using C = Compute<T>;
  if (spec.kind == FillSpec::Kind::kArange) {
    const scalar::Arange arange = scalar::Arange::Make(spec.start, spec.step);
    for (int64_t i = 0; i < numel; ++i) out[i] = Store<T>(arange.At<C>(i));
    return;
  }
  const double v = spec.kind == FillSpec::Kind::kZeros  ? 0.0
                   : spec.kind == FillSpec::Kind::kOnes ? 1.0
                                                        : spec.value;
  const T tv = Store<T>(scalar::Convert<C, double>(v));
  for (int64_t i = 0; i < numel; ++i) out[i] = tv;
}

template <typename T>
void RandomFill(const FillSpec& spec, int64_t numel, T* out) {
  uint64_t seed;
  if (spec.seed.has_value()) {
    seed = *spec.seed;
  } else {
    std::random_device rd;
    seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  const CounterRandom rng(seed);
  if (spec.kind == FillSpec::Kind::kRand) {
    const T low = static_cast<T>(spec.low);
    const T high = static_cast<T>(spec.high);
    for (int64_t i = 0; i < numel; ++i) {
      T v = static_cast<T>(spec.low + (spec.high - spec.low) * rng.Uniform(i));
      // Rounding to T may land on `high`; keep the interval half-open.
      if (v >= high && high > low) v = std::nextafter(high, low);
      out[i] = v;
    }
    return;
  }
  // Box-Muller on draws 2i and 2i+1: one normal per element, so element i
  // depends only on (seed, i).
  for (int64_t i = 0; i < numel; ++i) {
    const double u1 = rng.UniformOpenZero(2 * static_cast<uint64_t>(i));
    const double u2 = rng.Uniform(2 * static_cast<uint64_t>(i) + 1);
    const double z =
        std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    out[i] = static_cast<T>(spec.mean + spec.stddev * z);
  }
}

// out[i] = fn(a[.], b[.]) over out_shape, reading a and b through broadcast
// strides. The innermost dimension is a plain loop (contiguous or with a
// broadcast operand) that the compiler can vectorize.
template <typename T, typename O, typename Fn>
void BroadcastLoop(const T* a, const Shape& a_shape, const T* b,
                   const Shape& b_shape, O* out, const Shape& out_shape,
                   Fn fn) {
  const int64_t numel = out_shape.NumElements();
  if (a_shape == out_shape && b_shape == out_shape) {
    for (int64_t i = 0; i < numel; ++i) out[i] = fn(a[i], b[i]);
    return;
  }
  if (numel == 0) return;
  if (out_shape.rank() == 0) {
    out[0] = fn(a[0], b[0]);
    return;
  }
  const std::vector<int64_t> sa = BroadcastStrides(a_shape, out_shape);
  const std::vector<int64_t> sb = BroadcastStrides(b_shape, out_shape);
  const int last = out_shape.rank() - 1;
  const int64_t inner = out_shape.dim(last);
  const int64_t ia = sa[last], ib = sb[last];
  const int64_t outer = numel / inner;
  std::vector<int64_t> index(last, 0);
  int64_t oa = 0, ob = 0;
  for (int64_t o = 0; o < outer; ++o) {
    const T* pa = a + oa;
    const T* pb = b + ob;
    O* dst = out + o * inner;
    if (ia == 1 && ib == 1) {
      for (int64_t j = 0; j < inner; ++j) dst[j] = fn(pa[j], pb[j]);
    } else if (ia == 1 && ib == 0) {
      const T y = pb[0];
      for (int64_t j = 0; j < inner; ++j) dst[j] = fn(pa[j], y);
    } else if (ia == 0 && ib == 1) {
      const T x = pa[0];
      for (int64_t j = 0; j < inner; ++j) dst[j] = fn(x, pb[j]);
    } else {
      for (int64_t j = 0; j < inner; ++j) dst[j] = fn(pa[j * ia], pb[j * ib]);
    }
    // Advance the multi-index over the outer dims, odometer style.
    for (int d = last - 1; d >= 0; --d) {
      oa += sa[d];
      ob += sb[d];
      if (++index[d] < out_shape.dim(d)) break;
      oa -= sa[d] * out_shape.dim(d);
      ob -= sb[d] * out_shape.dim(d);
      index[d] = 0;
    }
  }
}

template <typename T>
void IntegerMatMul(const MatMulDims& dims, const T* a, const T* b, T* out) {
  const scalar::Add add;
  const scalar::Mul mul;
  for (int64_t p = 0; p < dims.batch; ++p) {
    const T* pa = a + p * dims.a_batch_stride;
    const T* pb = b + p * dims.b_batch_stride;
    T* pc = out + p * dims.out_batch_stride;
    for (int64_t i = 0; i < dims.m; ++i) {
      T* row = pc + i * dims.n;
      for (int64_t j = 0; j < dims.n; ++j) row[j] = 0;
      for (int64_t kk = 0; kk < dims.k; ++kk) {
        const T x = pa[i * dims.k + kk];
        const T* brow = pb + kk * dims.n;
        for (int64_t j = 0; j < dims.n; ++j) {
          row[j] = add(row[j], mul(x, brow[j]));
        }
      }
    }
  }
}

template <typename T>
void BlasMatMul(const MatMulDims& dims, const T* a, const T* b, T* out) {
  const blasint m = static_cast<blasint>(dims.m);
  const blasint n = static_cast<blasint>(dims.n);
  const blasint k = static_cast<blasint>(dims.k);
  const ScopedBlasPlacement placement(static_cast<double>(dims.m) *
                                      static_cast<double>(dims.n) *
                                      static_cast<double>(dims.k));
  for (int64_t p = 0; p < dims.batch; ++p) {
    const T* pa = a + p * dims.a_batch_stride;
    const T* pb = b + p * dims.b_batch_stride;
    T* pc = out + p * dims.out_batch_stride;
    if constexpr (std::is_same_v<T, float>) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, pa,
                  k, pb, n, 0.0f, pc, n);
    } else {
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0, pa,
                  k, pb, n, 0.0, pc, n);
    }
  }
}

// Half precision as PyTorch's CPU computes it: each problem's operands
// widened to float32, multiplied by BLAS, the result rounded back.
template <typename T>
absl::Status HalfMatMul(const MatMulDims& dims, const T* a, const T* b,
                        T* out) {
  if (dims.m > INT_MAX || dims.n > INT_MAX || dims.k > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("matmul dimensions (", dims.m, "x", dims.k, " and ",
                     dims.k, "x", dims.n, ") exceed the BLAS index range"));
  }
  std::vector<float> fa(static_cast<size_t>(dims.m * dims.k));
  std::vector<float> fb(static_cast<size_t>(dims.k * dims.n));
  std::vector<float> fc(static_cast<size_t>(dims.m * dims.n));
  const MatMulDims one{.batch = 1, .m = dims.m, .n = dims.n, .k = dims.k};
  for (int64_t p = 0; p < dims.batch; ++p) {
    const T* pa = a + p * dims.a_batch_stride;
    const T* pb = b + p * dims.b_batch_stride;
    for (size_t i = 0; i < fa.size(); ++i) fa[i] = Load(pa[i]);
    for (size_t i = 0; i < fb.size(); ++i) fb[i] = Load(pb[i]);
    if (dims.k > 0) {
      BlasMatMul<float>(one, fa.data(), fb.data(), fc.data());
    } else {
      std::fill(fc.begin(), fc.end(), 0.0f);
    }
    T* pc = out + p * dims.out_batch_stride;
    for (size_t i = 0; i < fc.size(); ++i) pc[i] = Store<T>(fc[i]);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FillKernel(const FillSpec& spec, DType dtype, int64_t numel,
                        void* out) {
  const bool random =
      spec.kind == FillSpec::Kind::kRand || spec.kind == FillSpec::Kind::kRandn;
  return DispatchDType(dtype, [&]<typename T>() -> absl::Status {
    T* dst = static_cast<T*>(out);
    if (!random) {
      FillTyped<T>(spec, numel, dst);
      return absl::OkStatus();
    }
    if constexpr (std::is_floating_point_v<T>) {
      RandomFill<T>(spec, numel, dst);
      return absl::OkStatus();
    } else {
      return NotImplementedError("random fill", dtype, "cpu");
    }
  });
}

absl::Status CastKernel(DType in_dtype, const void* in, DType out_dtype,
                        void* out, int64_t numel) {
  return DispatchDType(in_dtype, [&]<typename From>() -> absl::Status {
    return DispatchDType(out_dtype, [&]<typename To>() -> absl::Status {
      const From* src = static_cast<const From*>(in);
      To* dst = static_cast<To*>(out);
      for (int64_t i = 0; i < numel; ++i) dst[i] = CastElement<To>(src[i]);
      return absl::OkStatus();
    });
  });
}

absl::Status BinaryKernel(BinaryOp op, DType dtype, const void* a,
                          const Shape& a_shape, const void* b,
                          const Shape& b_shape, void* out,
                          const Shape& out_shape) {
  return DispatchDType(dtype, [&]<typename T>() -> absl::Status {
    using C = Compute<T>;
    bool defined = false;
    scalar::VisitBinaryOp(op, [&](auto fn) {
      using Fn = decltype(fn);
      if constexpr (Fn::template kDefined<C>) {
        defined = true;
        const T* pa = static_cast<const T*>(a);
        const T* pb = static_cast<const T*>(b);
        if constexpr (Fn::kComparison) {
          BroadcastLoop<T>(pa, a_shape, pb, b_shape,
                           static_cast<BoolStorage*>(out), out_shape,
                           [fn](T x, T y) { return fn(Load(x), Load(y)); });
        } else {
          BroadcastLoop<T>(
              pa, a_shape, pb, b_shape, static_cast<T*>(out), out_shape,
              [fn](T x, T y) { return Store<T>(fn(Load(x), Load(y))); });
        }
      }
    });
    return defined ? absl::OkStatus()
                   : NotImplementedError(BinaryOpName(op), dtype, "cpu");
  });
}

absl::Status WhereKernel(DType dtype, const void* cond, const Shape& cond_shape,
                         const void* x, const Shape& x_shape, const void* y,
                         const Shape& y_shape, void* out,
                         const Shape& out_shape) {
  const int64_t numel = out_shape.NumElements();
  if (numel == 0) return absl::OkStatus();
  const int rank = out_shape.rank();
  const std::vector<int64_t> sc = BroadcastStrides(cond_shape, out_shape);
  const std::vector<int64_t> sx = BroadcastStrides(x_shape, out_shape);
  const std::vector<int64_t> sy = BroadcastStrides(y_shape, out_shape);
  return DispatchDType(dtype, [&]<typename T>() -> absl::Status {
    const auto* pc = static_cast<const BoolStorage*>(cond);
    const T* px = static_cast<const T*>(x);
    const T* py = static_cast<const T*>(y);
    T* po = static_cast<T*>(out);
    const scalar::Select select;
    // A tight loop along out's last dim (each operand's stride there 0 or
    // 1); an odometer over the rows before it, each operand's offset
    // carried along.
    const int64_t inner = rank == 0 ? 1 : out_shape.dim(rank - 1);
    const int64_t ic = rank == 0 ? 0 : sc[rank - 1];
    const int64_t ix = rank == 0 ? 0 : sx[rank - 1];
    const int64_t iy = rank == 0 ? 0 : sy[rank - 1];
    std::vector<int64_t> index(rank, 0);
    int64_t oc = 0, ox = 0, oy = 0;
    for (int64_t i = 0; i < numel; i += inner) {
      const BoolStorage* rc = pc + oc;
      const T* rx = px + ox;
      const T* ry = py + oy;
      T* ro = po + i;
      if (ic == 1 && ix == 1 && iy == 1) {
        for (int64_t j = 0; j < inner; ++j) ro[j] = select(rc[j], rx[j], ry[j]);
      } else if (ic == 1 && ix == 1 && iy == 0) {  // where(c, x, scalar)
        for (int64_t j = 0; j < inner; ++j) ro[j] = select(rc[j], rx[j], *ry);
      } else {
        for (int64_t j = 0; j < inner; ++j) {
          ro[j] = select(rc[j * ic], rx[j * ix], ry[j * iy]);
        }
      }
      for (int d = rank - 2; d >= 0; --d) {
        oc += sc[d];
        ox += sx[d];
        oy += sy[d];
        if (++index[d] < out_shape.dim(d)) break;
        oc -= sc[d] * out_shape.dim(d);
        ox -= sx[d] * out_shape.dim(d);
        oy -= sy[d] * out_shape.dim(d);
        index[d] = 0;
      }
    }
    return absl::OkStatus();
  });
}

namespace {

// The window positions x in [0, ow) whose column x * s + offset falls
// inside [0, w): the run [*first, *last) (empty when first >= last).
inline void InsideRun(int64_t offset, int64_t s, int64_t w, int64_t ow,
                      int64_t* first, int64_t* last) {
  // x * s + offset >= 0  <=>  x >= ceil(-offset / s)
  const int64_t lo = offset >= 0 ? 0 : (-offset + s - 1) / s;
  // x * s + offset < w  <=>  x < ceil((w - offset) / s)
  const int64_t hi = w - offset <= 0 ? 0 : (w - offset + s - 1) / s;
  *first = std::min(lo, ow);
  *last = std::max(*first, std::min(hi, ow));
}

// Visits every row of the columns ([c, kh, kw, n, oh, ow], row-major), in
// order: visit(r, plane, row, offset, first, last) for column row r (its
// index), input plane `plane` (b * c + channel), input row `row` (outside
// [0, h) when the window row is all padding), and the run [first, last) of
// window positions x whose input column offset + x * sw lies in [0, w).
template <typename Visit>
void ForEachColumnRow(const WindowDims& d, Visit visit) {
  int64_t r = 0;
  for (int64_t c = 0; c < d.c; ++c) {
    for (int64_t i = 0; i < d.kh; ++i) {
      for (int64_t j = 0; j < d.kw; ++j) {
        const int64_t offset = -d.pw + j * d.dw;
        int64_t first, last;
        InsideRun(offset, d.sw, d.w, d.ow, &first, &last);
        for (int64_t b = 0; b < d.n; ++b) {
          for (int64_t y = 0; y < d.oh; ++y, ++r) {
            visit(r, b * d.c + c, y * d.sh - d.ph + i * d.dh, offset, first,
                  last);
          }
        }
      }
    }
  }
}

template <typename E>
void Im2Col(const WindowDims& d, E pad, const E* in, E* cols) {
  ForEachColumnRow(d, [&](int64_t r, int64_t plane, int64_t row,
                          int64_t offset, int64_t first, int64_t last) {
    E* out = cols + r * d.ow;
    if (row < 0 || row >= d.h) {
      std::fill(out, out + d.ow, pad);
      return;
    }
    // Column x is src[offset + x * sw].
    const E* src = in + (plane * d.h + row) * d.w;
    std::fill(out, out + first, pad);
    if (d.sw == 1) {
      std::copy(src + offset + first, src + offset + last, out + first);
    } else {
      for (int64_t x = first; x < last; ++x) out[x] = src[offset + x * d.sw];
    }
    std::fill(out + last, out + d.ow, pad);
  });
}

// col2im by scattering each column row into its input row: every input
// element gets its windows' entries added in (i, j) order starting from
// zero, as the gathering form sums them, so the result is the same to the
// bit. For types that compute in themselves (float, double).
template <typename T>
void Col2ImScatter(const WindowDims& d, const T* cols, T* dst) {
  std::fill(dst, dst + d.n * d.c * d.h * d.w, T{0});
  ForEachColumnRow(d, [&](int64_t r, int64_t plane, int64_t row,
                          int64_t offset, int64_t first, int64_t last) {
    if (row < 0 || row >= d.h) return;
    const T* in = cols + r * d.ow;
    // Column x is out[offset + x * sw].
    T* out = dst + (plane * d.h + row) * d.w;
    if (d.sw == 1) {
      for (int64_t x = first; x < last; ++x) out[offset + x] += in[x];
    } else {
      for (int64_t x = first; x < last; ++x) out[offset + x * d.sw] += in[x];
    }
  });
}

template <typename E>
void Im2ColAs(const WindowDims& dims, uint64_t pad_bits, const void* in,
              void* out) {
  E pad;
  std::memcpy(&pad, &pad_bits, sizeof(E));  // little-endian: the low bytes
  Im2Col(dims, pad, static_cast<const E*>(in), static_cast<E*>(out));
}

}  // namespace

void Im2ColKernel(size_t elem_size, const WindowDims& dims, uint64_t pad_bits,
                  const void* in, void* out) {
  switch (elem_size) {
    case 1:
      return Im2ColAs<uint8_t>(dims, pad_bits, in, out);
    case 2:
      return Im2ColAs<uint16_t>(dims, pad_bits, in, out);
    case 4:
      return Im2ColAs<uint32_t>(dims, pad_bits, in, out);
    default:
      return Im2ColAs<uint64_t>(dims, pad_bits, in, out);
  }
}

absl::Status Col2ImKernel(DType dtype, const WindowDims& d, const void* cols,
                          void* out) {
  return DispatchDType(dtype, [&]<typename T>() -> absl::Status {
    if constexpr (!std::is_floating_point_v<Compute<T>>) {
      return NotImplementedError("col2im", dtype, "cpu");
    } else {
      using C = Compute<T>;
      const T* in = static_cast<const T*>(cols);
      T* dst = static_cast<T*>(out);
      if constexpr (std::is_same_v<C, T>) {
        Col2ImScatter(d, in, dst);
        return absl::OkStatus();
      }
      for (int64_t b = 0; b < d.n; ++b) {
        for (int64_t c = 0; c < d.c; ++c) {
          for (int64_t y = 0; y < d.h; ++y) {
            for (int64_t x = 0; x < d.w; ++x) {
              C acc = 0;
              for (int64_t i = 0; i < d.kh; ++i) {
                const int64_t rows = y + d.ph - i * d.dh;
                if (rows < 0 || rows % d.sh != 0 || rows / d.sh >= d.oh) {
                  continue;
                }
                const int64_t oy = rows / d.sh;
                for (int64_t j = 0; j < d.kw; ++j) {
                  const int64_t cols_at = x + d.pw - j * d.dw;
                  if (cols_at < 0 || cols_at % d.sw != 0 ||
                      cols_at / d.sw >= d.ow) {
                    continue;
                  }
                  const int64_t ox = cols_at / d.sw;
                  acc += Load(in[((((c * d.kh + i) * d.kw + j) * d.n + b) *
                                       d.oh +
                                   oy) *
                                      d.ow +
                                  ox]);
                }
              }
              *dst++ = Store<T>(acc);
            }
          }
        }
      }
      return absl::OkStatus();
    }
  });
}

absl::Status UnaryKernel(UnaryOp op, double alpha, double beta, DType dtype,
                         const void* in, void* out, int64_t numel) {
  return DispatchDType(dtype, [&]<typename T>() -> absl::Status {
    using C = Compute<T>;
    bool defined = false;
    scalar::VisitUnaryOp(op, alpha, beta, [&](auto fn) {
      if constexpr (decltype(fn)::template kDefined<C>) {
        defined = true;
        const T* src = static_cast<const T*>(in);
        T* dst = static_cast<T*>(out);
        for (int64_t i = 0; i < numel; ++i) dst[i] = Store<T>(fn(Load(src[i])));
      }
    });
    return defined ? absl::OkStatus()
                   : NotImplementedError(UnaryOpName(op), dtype, "cpu");
  });
}

absl::Status ReduceKernel(ReduceOp op, DType dtype, const ReduceDims& dims,
                          const void* in, void* out) {
  if (dims.n == 0 && !scalar::IsSumLike(op)) {
    return absl::InternalError(absl::StrCat(
        ToAbsl(ReduceOpName(op)), " over an empty dimension reached the cpu"));
  }
  return DispatchDType(dtype, [&]<typename T>() -> absl::Status {
    if (!scalar::ReduceDefined<Compute<T>>(op)) {
      return NotImplementedError(ReduceOpName(op), dtype, "cpu");
    }
    ReduceTyped<T>(op, dims, static_cast<const T*>(in), out);
    return absl::OkStatus();
  });
}

void PermuteKernel(size_t elem_size, const void* in, const Shape& in_shape,
                   const std::vector<int>& perm, void* out) {
  const int rank = in_shape.rank();
  const int64_t numel = in_shape.NumElements();
  if (numel == 0) return;
  if (rank == 0) {
    std::memcpy(out, in, elem_size);
    return;
  }
  // Row-major strides of the input, reordered to walk the output in order.
  std::vector<int64_t> in_strides(rank, 1);
  for (int d = rank - 2; d >= 0; --d) {
    in_strides[d] = in_strides[d + 1] * in_shape.dim(d + 1);
  }
  std::vector<int64_t> out_dims(rank), strides(rank);
  for (int i = 0; i < rank; ++i) {
    out_dims[i] = in_shape.dim(perm[i]);
    strides[i] = in_strides[perm[i]];
  }
  // A strided gather along the output's last dim, an odometer over the
  // rows before it.
  const int64_t inner = out_dims[rank - 1], step = strides[rank - 1];
  auto walk = [&]<typename E>() {
    const E* src = static_cast<const E*>(in);
    E* dst = static_cast<E*>(out);
    std::vector<int64_t> index(rank, 0);
    int64_t offset = 0;
    for (int64_t i = 0; i < numel; i += inner) {
      const E* from = src + offset;
      E* to = dst + i;
      for (int64_t j = 0; j < inner; ++j) to[j] = from[j * step];
      for (int d = rank - 2; d >= 0; --d) {
        offset += strides[d];
        if (++index[d] < out_dims[d]) break;
        offset -= strides[d] * out_dims[d];
        index[d] = 0;
      }
    }
  };
  switch (elem_size) {
    case 1:
      walk.template operator()<uint8_t>();
      return;
    case 2:
      walk.template operator()<uint16_t>();
      return;
    case 4:
      walk.template operator()<uint32_t>();
      return;
    default:
      walk.template operator()<uint64_t>();
      return;
  }
}

absl::Status MatMulKernel(const MatMulDims& dims, DType dtype, const void* a,
                          const void* b, void* out) {
  if (dims.batch == 0 || dims.m == 0 || dims.n == 0) return absl::OkStatus();
  return DispatchDType(dtype, [&]<typename T>() -> absl::Status {
    const T* pa = static_cast<const T*>(a);
    const T* pb = static_cast<const T*>(b);
    T* po = static_cast<T*>(out);
    if constexpr (kIsBool<T>) {
      return NotImplementedError("matmul", dtype, "cpu");
    } else if constexpr (kIsHalf<T>) {
      return HalfMatMul<T>(dims, pa, pb, po);
    } else if constexpr (std::is_integral_v<T>) {
      IntegerMatMul<T>(dims, pa, pb, po);
      return absl::OkStatus();
    } else {
      // BLAS rejects a leading dimension of 0 and sizes past its int.
      const bool blas_ok = dims.k > 0 && dims.m <= INT_MAX &&
                           dims.n <= INT_MAX && dims.k <= INT_MAX;
      if (blas_ok) {
        BlasMatMul<T>(dims, pa, pb, po);
      } else if (dims.k == 0) {
        for (int64_t p = 0; p < dims.batch; ++p) {
          std::fill_n(po + p * dims.out_batch_stride, dims.m * dims.n, T(0));
        }
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("matmul dimensions (", dims.m, "x", dims.k, " and ",
                         dims.k, "x", dims.n, ") exceed the BLAS index range"));
      }
      return absl::OkStatus();
    }
  });
}

}  // namespace tensord::core::cpu
