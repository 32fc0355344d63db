#include "core/planner/window_plan.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/absl_compat.h"
#include "core/base/op_checks.h"
#include "core/planner/planner.h"
#include "core/base/status.h"

namespace tensord::core {
namespace {

// One window argument as (height, width): empty gives `fallback`, one
// value both. `bad_length` is the message for a longer list.
absl::Status Pair(const std::vector<int64_t>& list,
                  std::pair<int64_t, int64_t> fallback,
                  const std::string& bad_length,
                  std::pair<int64_t, int64_t>* out) {
  if (list.empty()) {
    *out = fallback;
  } else if (list.size() == 1) {
    *out = {list[0], list[0]};
  } else if (list.size() == 2) {
    *out = {list[0], list[1]};
  } else {
    return absl::InvalidArgumentError(bad_length);
  }
  return absl::OkStatus();
}

std::string ListString(const std::vector<int64_t>& list) {
  return absl::StrCat("[", absl::StrJoin(list, ", "), "]");
}

// The number of windows along one dim: (size + 2 pad - dilation (k - 1) -
// 1) / stride + 1, computed wide (the arguments are a client's int64s);
// below 1 when the dilated kernel does not fit the padded size.
int64_t Windows(int64_t size, int64_t k, int64_t stride, int64_t pad,
                int64_t dilation) {
  const __int128 span = static_cast<__int128>(dilation) * (k - 1) + 1;
  const __int128 room = static_cast<__int128>(size) + 2 * static_cast<__int128>(pad) - span;
  if (room < 0) return 0;
  const __int128 n = room / stride + 1;
  return n > INT64_MAX ? INT64_MAX : static_cast<int64_t>(n);
}

// x's [n, c, h, w] (n = 1 for an unbatched [c, h, w]).
void Nchw(const Shape& x, WindowDims* w) {
  const bool batched = x.rank() == 4;
  w->n = batched ? x.dim(0) : 1;
  w->c = x.dim(batched ? 1 : 0);
  w->h = x.dim(batched ? 2 : 1);
  w->w = x.dim(batched ? 3 : 2);
}

// [n, c, oh, ow], or [c, oh, ow] for an unbatched x.
absl::StatusOr<Shape> OutShape(const Shape& x, int64_t c, int64_t oh,
                               int64_t ow) {
  if (x.rank() == 4) {
    const int64_t dims[] = {x.dim(0), c, oh, ow};
    return Shape::Make(dims);
  }
  const int64_t dims[] = {c, oh, ow};
  return Shape::Make(dims);
}

// The columns im2col makes for `w` must be a tensor too: their count may
// not overflow.
absl::Status CheckColumns(const WindowDims& w, std::string_view op) {
  const int64_t dims[] = {w.c, w.kh, w.kw, w.n, w.oh, w.ow};
  if (Shape::Make(dims).ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      ToAbsl(op), ": the unfolded input (", w.c, " x ", w.kh, " x ", w.kw,
      " x ", w.n, " x ", w.oh, " x ", w.ow, " elements) is too large"));
}

}  // namespace

std::string_view PoolName(PoolKind kind) {
  return kind == PoolKind::kMax ? "max_pool2d" : "avg_pool2d";
}

absl::StatusOr<Conv2dPlan> PlanConv2d(const OperandDesc& x,
                                      const OperandDesc& weight,
                                      const OperandDesc* bias,
                                      const WindowArgs& args,
                                      const Target& target) {
  CountPlan(Planner::kConv2d);
  const Shape& xs = x.shape;
  const Shape& ws = weight.shape;
  if (xs.rank() != 3 && xs.rank() != 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Expected 3D (unbatched) or 4D (batched) input to conv2d, but got "
        "input of size: ",
        xs.ToString()));
  }
  if (ws.rank() >= 3 && ws.rank() != 4) {
    // torch expands stride to weight.dim() - 2 values before it looks at the
    // weight's rank (conv2d's stride is always 2 values by then).
    // A list of another length is quoted as it came (it was once refused
    // with an empty message).
    std::pair<int64_t, int64_t> given;
    const std::string shown =
        Pair(args.stride, {1, 1}, "", &given).ok()
            ? absl::StrCat("[", given.first, ", ", given.second, "]")
            : ListString(args.stride);
    return absl::InvalidArgumentError(absl::StrCat(
        "expected stride to be a single integer value or a list of ",
        ws.rank() - 2,
        " values to match the convolution dimensions, but got stride=",
        shown));
  }
  if (ws.rank() != 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Expected 4-dimensional weight for ", xs.rank(),
        "-dimensional input ", xs.ToString(), ", but got ", ws.rank(),
        "-dimensional weight of size ", ws.ToString(), " instead"));
  }
  auto bad_length = [](std::string_view name,
                       const std::vector<int64_t>& list) {
    return absl::StrCat("expected ", ToAbsl(name),
                        " to be a single integer value or a list of 2 values "
                        "to match the convolution dimensions, but got ",
                        ToAbsl(name), "=", ListString(list));
  };
  std::pair<int64_t, int64_t> stride, padding, dilation;
  RETURN_IF_ERROR(
      Pair(args.stride, {1, 1}, bad_length("stride", args.stride), &stride));
  RETURN_IF_ERROR(Pair(args.padding, {0, 0},
                       bad_length("padding", args.padding), &padding));
  RETURN_IF_ERROR(Pair(args.dilation, {1, 1},
                       bad_length("dilation", args.dilation), &dilation));
  if (stride.first <= 0 || stride.second <= 0) {
    return absl::InvalidArgumentError("non-positive stride is not supported");
  }
  if (padding.first < 0 || padding.second < 0) {
    return absl::InvalidArgumentError("negative padding is not supported");
  }
  if (dilation.first <= 0 || dilation.second <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dilation should be greater than zero, but got [",
                     dilation.first, ", ", dilation.second, "]"));
  }
  if (args.groups <= 0) {
    return absl::InvalidArgumentError("non-positive groups is not supported");
  }
  // torch compares the bias's dtype here (naming C++ types), the weight's
  // in the kernel, after every shape check (below).
  if (bias != nullptr && bias->dtype != x.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Input type (", ToAbsl(CppTypeName(x.dtype)), ") and bias type (",
        ToAbsl(CppTypeName(bias->dtype)), ") should be the same"));
  }
  const int64_t oc = ws.dim(0);
  const int64_t g = args.groups;
  if (oc < g || oc % g != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Given groups=", g, ", expected weight to be ",
                     oc < g ? absl::StrCat("at least ", g)
                            : absl::StrCat("divisible by ", g),
                     " at dimension 0, but got weight of size [", ws.ToString(),
                     "] instead"));
  }
  Conv2dPlan plan;
  WindowDims& w = plan.window;
  Nchw(xs, &w);
  if (w.c != ws.dim(1) * g) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Given groups=", g, ", weight of size ", ws.ToString(),
        ", expected input", xs.ToString(), " to have ", ws.dim(1) * g,
        " channels, but got ", w.c, " channels instead"));
  }
  if (bias != nullptr &&
      (bias->shape.rank() != 1 || bias->shape.dim(0) != oc)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Given weight of size ", ws.ToString(),
        ", expected bias to be 1-dimensional with ", oc,
        " elements, but got bias of size ", bias->shape.ToString(),
        " instead"));
  }
  w.kh = ws.dim(2);
  w.kw = ws.dim(3);
  std::tie(w.sh, w.sw) = stride;
  std::tie(w.ph, w.pw) = padding;
  std::tie(w.dh, w.dw) = dilation;
  w.oh = Windows(w.h, w.kh, w.sh, w.ph, w.dh);
  w.ow = Windows(w.w, w.kw, w.sw, w.pw, w.dw);
  if (w.oh < 1 || w.ow < 1) {
    const __int128 span_h = static_cast<__int128>(w.dh) * (w.kh - 1) + 1;
    const __int128 span_w = static_cast<__int128>(w.dw) * (w.kw - 1) + 1;
    auto str = [](__int128 v) {
      return v > INT64_MAX ? std::string("(too large)")
                           : absl::StrCat(static_cast<int64_t>(v));
    };
    return absl::InvalidArgumentError(absl::StrCat(
        "Calculated padded input size per channel: (",
        str(static_cast<__int128>(w.h) + 2 * static_cast<__int128>(w.ph)),
        " x ",
        str(static_cast<__int128>(w.w) + 2 * static_cast<__int128>(w.pw)),
        "). Kernel size: (", str(span_h), " x ", str(span_w),
        "). Kernel size can't be greater than actual input size"));
  }
  if (weight.dtype != x.dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected scalar type ", ToAbsl(ScalarTypeName(x.dtype)),
                     " but found ", ToAbsl(ScalarTypeName(weight.dtype))));
  }
  if (!IsFloating(x.dtype) || !target.caps.Has(OpKind::kMatMul, x.dtype)) {
    return NotImplementedError("conv2d", x.dtype);
  }
  RETURN_IF_ERROR(CheckColumns(w, "conv2d"));
  plan.groups = g;
  plan.out_channels = oc;
  plan.dtype = x.dtype;
  ASSIGN_OR_RETURN(plan.out, OutShape(xs, oc, w.oh, w.ow));
  return plan;
}

absl::StatusOr<Pool2dPlan> PlanPool2d(PoolKind kind, DType dtype,
                                      const Shape& x, const WindowArgs& args,
                                      const Target& target) {
  CountPlan(Planner::kPool2d);
  const std::string name(PoolName(kind));
  const bool empty_plane =
      x.rank() >= 3 && (x.dim(x.rank() - 1) == 0 || x.dim(x.rank() - 2) == 0 ||
                        x.dim(x.rank() - 3) == 0);
  if (kind == PoolKind::kMax && x.rank() != 3 && x.rank() != 4) {
    return absl::InvalidArgumentError(
        "non-empty 3D or 4D (batch mode) tensor expected for input");
  }
  // avg_pool2d reads the size of dim -3 first: an IndexError below rank 3.
  if (kind == PoolKind::kAvg) RETURN_IF_ERROR(WrapDim(-3, x.rank()).status());
  if ((x.rank() != 3 && x.rank() != 4) || empty_plane) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Expected 3D or 4D (batch mode) tensor with optional 0 dim batch "
        "size for input, but got:",
        x.ToString()));
  }
  if (kind == PoolKind::kAvg && !args.dilation.empty()) {
    return absl::InvalidArgumentError("avg_pool2d takes no dilation");
  }
  std::pair<int64_t, int64_t> kernel, stride, padding, dilation;
  if (args.kernel_size.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " needs a kernel_size"));
  }
  RETURN_IF_ERROR(Pair(args.kernel_size, {0, 0},
                       absl::StrCat(name,
                                    ": kernel_size must either be a single "
                                    "int, or a tuple of two ints"),
                       &kernel));
  RETURN_IF_ERROR(Pair(args.stride, kernel,
                       absl::StrCat(name,
                                    ": stride must either be omitted, a single "
                                    "int, or a tuple of two ints"),
                       &stride));
  RETURN_IF_ERROR(Pair(args.padding, {0, 0},
                       absl::StrCat(name,
                                    ": padding must either be a single int, or "
                                    "a tuple of two ints"),
                       &padding));
  RETURN_IF_ERROR(Pair(args.dilation, {1, 1},
                       absl::StrCat(name,
                                    ": dilation must be either a single int, "
                                    "or a tuple of two ints"),
                       &dilation));
  // torch's order: pooling_output_shape (stride, padding), then
  // pool2d_shape_check (kernel, stride, dilation).
  if (stride.first == 0 || stride.second == 0) {
    return absl::InvalidArgumentError("stride should not be zero");
  }
  for (const auto& [p, k] :
       {std::pair{padding.first, kernel.first},
        std::pair{padding.second, kernel.second}}) {
    if (p < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("pad must be non-negative, but got pad: ", p));
    }
    if (p > k / 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("pad should be at most half of kernel size, but got "
                       "pad=",
                       p, " and kernel_size=", k));
    }
  }
  if (kernel.first <= 0 || kernel.second <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel size should be greater than zero, but got kH: ", kernel.first,
        " kW: ", kernel.second));
  }
  if (stride.first <= 0 || stride.second <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stride should be greater than zero, but got dH: ", stride.first,
        " dW: ", stride.second));
  }
  if (dilation.first <= 0 || dilation.second <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dilation should be greater than zero, but got dilationH: ",
        dilation.first, " dilationW: ", dilation.second));
  }
  if (!IsFloating(dtype) || !target.caps.Has(OpKind::kReduce, dtype)) {
    return NotImplementedError(name, dtype);
  }
  Pool2dPlan plan;
  WindowDims& w = plan.window;
  Nchw(x, &w);
  std::tie(w.kh, w.kw) = kernel;
  std::tie(w.sh, w.sw) = stride;
  std::tie(w.ph, w.pw) = padding;
  std::tie(w.dh, w.dw) = dilation;
  w.oh = Windows(w.h, w.kh, w.sh, w.ph, w.dh);
  w.ow = Windows(w.w, w.kw, w.sw, w.pw, w.dw);
  if (w.oh < 1 || w.ow < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Given input size: (", w.c, "x", w.h, "x", w.w,
        "). Calculated output size: (", w.c, "x", w.oh, "x", w.ow,
        "). Output size is too small"));
  }
  RETURN_IF_ERROR(CheckColumns(w, name));
  ASSIGN_OR_RETURN(plan.out, OutShape(x, w.c, w.oh, w.ow));
  return plan;
}

absl::StatusOr<AdaptivePoolPlan> PlanAdaptiveAvgPool2d(
    DType dtype, const Shape& x, const std::vector<int64_t>& output_size,
    const Target& target) {
  CountPlan(Planner::kAdaptiveAvgPool2d);
  if (x.rank() != 3 && x.rank() != 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got ",
        x.ToString()));
  }
  for (int d = x.rank() - 3; d < x.rank(); ++d) {
    if (x.dim(d) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "adaptive_avg_pool2d(): Expected input to have non-zero size for "
          "non-batch dimensions, but input has sizes ",
          x.ToString(), " with dimension ", d, " being empty"));
    }
  }
  std::pair<int64_t, int64_t> size;
  RETURN_IF_ERROR(Pair(output_size, {-1, -1},
                       "adaptive_avg_pool2d: output_size must be 2", &size));
  if (output_size.empty()) {
    return absl::InvalidArgumentError(
        "adaptive_avg_pool2d: output_size must be 2");
  }
  if (size.first < 0 || size.second < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "adaptive_avg_pool2d: elements of output_size must be greater than "
        "or equal to 0 but received {",
        size.first, ", ", size.second, "}"));
  }
  if (!IsFloating(dtype) || !target.caps.Has(OpKind::kMatMul, dtype)) {
    return NotImplementedError("adaptive_avg_pool2d", dtype);
  }
  WindowDims w;
  Nchw(x, &w);
  AdaptivePoolPlan plan;
  plan.planes = w.n * w.c;
  plan.h = w.h;
  plan.w = w.w;
  std::tie(plan.oh, plan.ow) = size;
  ASSIGN_OR_RETURN(plan.out, OutShape(x, w.c, plan.oh, plan.ow));
  return plan;
}

}  // namespace tensord::core
