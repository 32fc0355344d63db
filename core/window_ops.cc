// conv2d and the 2-d pooling ops on stored tensors (Apply in executor.cc
// calls them): planned by core/window_plan.h, run as kernels every device
// has. The input's windows are unfolded into columns (im2col, laid out
// [c, kh, kw, n, oh, ow]); conv2d is then one matrix product per group
// (weight [oc/g, c/g*kh*kw] times that group's columns) and the bias, the
// pooling ops one reduction over each window's kh*kw column entries. The
// products come out channel-major ([oc, n, oh*ow]) and are permuted to
// [n, oc, oh, ow] unless n == 1, when they already are.
#include "core/runtime_impl.h"
#include "core/window_plan.h"

namespace tensord::core {
namespace {

absl::StatusOr<Shape> Dims(std::initializer_list<int64_t> dims) {
  return Shape::Make(std::span<const int64_t>(dims.begin(), dims.size()));
}

// `ref` read with another shape of the same element count.
absl::StatusOr<TensorRef> As(TensorRef ref,
                             std::initializer_list<int64_t> dims) {
  ASSIGN_OR_RETURN(ref.shape, Dims(dims));
  return ref;
}

// -inf's bits in a floating dtype (max pooling's padding).
uint64_t NegativeInfinityBits(DType dtype) {
  switch (dtype) {
    case DType::kFloat64:
      return 0xfff0000000000000ull;
    case DType::kFloat16:
      return 0xfc00;
    case DType::kBFloat16:
      return 0xff80;
    default:
      return 0xff800000;  // float32 (the planner admits floating only)
  }
}

}  // namespace

absl::StatusOr<Runtime::Impl::Output> Runtime::Impl::Conv2dOut(
    const StoredTensor& x, const StoredTensor& weight, const StoredTensor* bias,
    const WindowArgs& args) {
  DeviceSlot& slot = SlotOf(x.device);
  Device& device = *x.device;
  std::optional<OperandDesc> bias_desc;
  if (bias != nullptr) bias_desc.emplace(OperandDesc{bias->dtype, bias->shape});
  ASSIGN_OR_RETURN(Conv2dPlan plan,
                   PlanConv2d(OperandDesc{x.dtype, x.shape},
                              OperandDesc{weight.dtype, weight.shape},
                              bias_desc ? &*bias_desc : nullptr, args,
                              TargetOf(device)));
  const WindowDims& win = plan.window;
  const DType dtype = plan.dtype;
  const int64_t g = plan.groups, oc = plan.out_channels, oc_g = oc / g;
  const int64_t plane = win.oh * win.ow, cols = win.n * plane;
  const int64_t k = win.c / g * win.kh * win.kw;
  ASSIGN_OR_RETURN(Output out, AllocateOutput(slot, dtype, plan.out));
  if (out.shape.NumElements() == 0) return out;
  // [g, oc/g, n * oh * ow]: with one image, `out` itself.
  Output product;
  if (win.n > 1) {
    ASSIGN_OR_RETURN(Shape shape, Dims({g, oc_g, cols}));
    ASSIGN_OR_RETURN(product, AllocateOutput(slot, dtype, std::move(shape)));
  }
  const TensorRef product_ref = win.n > 1 ? product.ref() : out.ref();
  if (k == 0) {  // no input channels: empty sums
    RETURN_IF_ERROR(device.Launch({FillSpec{}, {}, product_ref}));
  } else {
    ASSIGN_OR_RETURN(Shape shape, Dims({g, k, cols}));
    ASSIGN_OR_RETURN(Output unfolded,
                     AllocateOutput(slot, dtype, std::move(shape)));
    RETURN_IF_ERROR(
        device.Launch({Im2ColArgs{win, 0}, {RefOf(x)}, unfolded.ref()}));
    MatMulDims dims;
    dims.batch = g;
    dims.m = oc_g;
    dims.n = cols;
    dims.k = k;
    dims.a_batch_stride = oc_g * k;
    dims.b_batch_stride = k * cols;
    dims.out_batch_stride = oc_g * cols;
    RETURN_IF_ERROR(
        device.Launch({dims, {RefOf(weight), unfolded.ref()}, product_ref}));
  }
  if (win.n > 1) {
    ASSIGN_OR_RETURN(TensorRef src, As(product.ref(), {oc, win.n, plane}));
    ASSIGN_OR_RETURN(TensorRef dst, As(out.ref(), {win.n, oc, plane}));
    RETURN_IF_ERROR(device.Launch({PermuteArgs{{1, 0, 2}}, {src}, dst}));
  }
  if (bias != nullptr) {
    ASSIGN_OR_RETURN(TensorRef y, As(out.ref(), {win.n, oc, plane}));
    ASSIGN_OR_RETURN(TensorRef b, As(RefOf(*bias), {oc, 1}));
    RETURN_IF_ERROR(device.Launch({BinaryArgs{BinaryOp::kAdd}, {y, b}, y}));
  }
  return out;
}

absl::StatusOr<Runtime::Impl::Output> Runtime::Impl::Pool2dOut(
    PoolKind kind, const StoredTensor& x, const WindowArgs& args) {
  DeviceSlot& slot = SlotOf(x.device);
  Device& device = *x.device;
  ASSIGN_OR_RETURN(Pool2dPlan plan, PlanPool2d(kind, x.dtype, x.shape, args,
                                               TargetOf(device)));
  const WindowDims& win = plan.window;
  const int64_t plane = win.oh * win.ow, cols = win.n * plane;
  const int64_t window = win.kh * win.kw;
  ASSIGN_OR_RETURN(Output out, AllocateOutput(slot, x.dtype, plan.out));
  if (out.shape.NumElements() == 0) return out;
  ASSIGN_OR_RETURN(Shape shape, Dims({win.c, window, cols}));
  ASSIGN_OR_RETURN(Output unfolded,
                   AllocateOutput(slot, x.dtype, std::move(shape)));
  const bool max = kind == PoolKind::kMax;
  RETURN_IF_ERROR(device.Launch(
      {Im2ColArgs{win, max ? NegativeInfinityBits(x.dtype) : 0},
       {RefOf(x)},
       unfolded.ref()}));
  // [c, n * oh * ow]: with one image, `out` itself.
  Output pooled;
  if (win.n > 1) {
    ASSIGN_OR_RETURN(Shape pooled_shape, Dims({win.c, cols}));
    ASSIGN_OR_RETURN(pooled,
                     AllocateOutput(slot, x.dtype, std::move(pooled_shape)));
  }
  ASSIGN_OR_RETURN(const TensorRef pooled_ref,
                   As(win.n > 1 ? pooled.ref() : out.ref(), {win.c, cols}));
  const ReduceOp reduce = max                      ? ReduceOp::kMax
                          : args.count_include_pad ? ReduceOp::kMean
                                                   : ReduceOp::kSum;
  RETURN_IF_ERROR(device.Launch({ReduceArgs{reduce, {win.c, window, cols}},
                                 {unfolded.ref()},
                                 pooled_ref}));
  unfolded = Output{};
  if (!max && !args.count_include_pad) {
    // Each window's sum over its elements inside the input: the count of
    // ones the same windows see in an all-ones plane.
    WindowDims one = win;
    one.n = 1;
    one.c = 1;
    ASSIGN_OR_RETURN(Shape ones_shape, Dims({1, 1, win.h, win.w}));
    ASSIGN_OR_RETURN(Output ones,
                     AllocateOutput(slot, x.dtype, std::move(ones_shape)));
    FillSpec fill;
    fill.kind = FillSpec::Kind::kOnes;
    RETURN_IF_ERROR(device.Launch({fill, {}, ones.ref()}));
    ASSIGN_OR_RETURN(Shape seen_shape, Dims({window, plane}));
    ASSIGN_OR_RETURN(Output seen,
                     AllocateOutput(slot, x.dtype, std::move(seen_shape)));
    RETURN_IF_ERROR(
        device.Launch({Im2ColArgs{one, 0}, {ones.ref()}, seen.ref()}));
    ASSIGN_OR_RETURN(Shape count_shape, Dims({plane}));
    ASSIGN_OR_RETURN(Output count,
                     AllocateOutput(slot, x.dtype, std::move(count_shape)));
    RETURN_IF_ERROR(device.Launch({ReduceArgs{ReduceOp::kSum, {1, window, plane}},
                                   {seen.ref()},
                                   count.ref()}));
    ASSIGN_OR_RETURN(TensorRef sums, As(pooled_ref, {win.c * win.n, plane}));
    RETURN_IF_ERROR(device.Launch(
        {BinaryArgs{BinaryOp::kDiv}, {sums, count.ref()}, sums}));
  }
  if (win.n > 1) {
    ASSIGN_OR_RETURN(TensorRef src, As(pooled.ref(), {win.c, win.n, plane}));
    ASSIGN_OR_RETURN(TensorRef dst, As(out.ref(), {win.n, win.c, plane}));
    RETURN_IF_ERROR(device.Launch({PermuteArgs{{1, 0, 2}}, {src}, dst}));
  }
  return out;
}

absl::StatusOr<Runtime::Impl::Output> Runtime::Impl::AdaptiveAvgPool2dOut(
    const StoredTensor& x, const std::vector<int64_t>& output_size) {
  DeviceSlot& slot = SlotOf(x.device);
  Device& device = *x.device;
  ASSIGN_OR_RETURN(AdaptivePoolPlan plan,
                   PlanAdaptiveAvgPool2d(x.dtype, x.shape, output_size,
                                         TargetOf(device)));
  if (plan.out.NumElements() == 0) {
    return AllocateOutput(slot, x.dtype, std::move(plan.out));
  }
  // The averaging matrix of `out` windows over `in` elements, [out, in]
  // (or [in, out]): built in float64 on the host, cast on the device.
  auto averaging = [&](int64_t out, int64_t in,
                       bool transposed) -> absl::StatusOr<TensorPtr> {
    std::vector<double> m(static_cast<size_t>(out * in), 0.0);
    for (int64_t i = 0; i < out; ++i) {
      const int64_t start = AdaptiveStart(i, out, in);
      const int64_t end = AdaptiveEnd(i, out, in);
      for (int64_t k = start; k < end; ++k) {
        m[transposed ? k * out + i : i * in + k] = 1.0 / (end - start);
      }
    }
    ASSIGN_OR_RETURN(Shape shape, transposed ? Dims({in, out}) : Dims({out, in}));
    ASSIGN_OR_RETURN(Output wide,
                     AllocateOutput(slot, DType::kFloat64, std::move(shape)));
    RETURN_IF_ERROR(device.CopyFromHost(m.data(), *wide.buffer, 0,
                                        m.size() * sizeof(double)));
    TensorPtr matrix = Stored(slot, std::move(wide));
    if (x.dtype == DType::kFloat64) return matrix;
    ASSIGN_OR_RETURN(Output narrow, CastOut(*matrix, x.dtype));
    return Stored(slot, std::move(narrow));
  };
  ASSIGN_OR_RETURN(TensorPtr rows, averaging(plan.oh, plan.h, false));
  ASSIGN_OR_RETURN(TensorPtr cols, averaging(plan.ow, plan.w, true));
  ASSIGN_OR_RETURN(TensorPtr planes, ViewOf(x, {plan.planes, plan.h, plan.w}));
  ASSIGN_OR_RETURN(Output tall, MatMulOut(*rows, *planes));  // [p, oh, w]
  const TensorPtr y = Stored(slot, std::move(tall));
  ASSIGN_OR_RETURN(Output out, MatMulOut(*y, *cols));  // [p, oh, ow]
  out.shape = std::move(plan.out);
  return out;
}

}  // namespace tensord::core
