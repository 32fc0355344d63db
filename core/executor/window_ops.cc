// conv2d and the 2-d pooling ops on stored tensors (Apply in executor.cc
// calls them): planned by core/planner/window_plan.h, run as kernels every device
// has. The input's windows are unfolded into columns (im2col, laid out
// [c, kh, kw, n, oh, ow]); conv2d is then one matrix product per group
// (weight [oc/g, c/g*kh*kw] times that group's columns) and the bias, the
// pooling ops one reduction over each window's kh*kw column entries. The
// products come out channel-major ([oc, n, oh*ow]) and are permuted to
// [n, oc, oh, ow] unless n == 1, when they already are.
#include "core/executor/executor.h"
#include "core/autograd/grad_math.h"
#include "core/planner/op_plan.h"
#include "core/planner/window_plan.h"

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

PoolAlgorithm PoolAlgorithmOf(PoolKind kind, const WindowArgs& args) {
  if (kind == PoolKind::kMax) return PoolAlgorithm::kMax;
  return args.count_include_pad ? PoolAlgorithm::kAvgIncludePad
                                : PoolAlgorithm::kAvgExcludePad;
}

}  // namespace

absl::StatusOr<Executor::Output> Executor::Conv2dOut(const StoredTensor& x,
                                                     const StoredTensor& weight,
                                                     const StoredTensor* bias,
                                                     const WindowArgs& args) {
  std::optional<OperandDesc> bias_desc;
  if (bias != nullptr) bias_desc.emplace(OperandDesc{bias->dtype, bias->shape});
  ASSIGN_OR_RETURN(
      Conv2dPlan plan,
      PlanConv2d(OperandDesc{x.dtype, x.shape},
                 OperandDesc{weight.dtype, weight.shape},
                 bias_desc ? &*bias_desc : nullptr, args, TargetOf(*x.device)));
  return Conv2dOut(plan, x, weight, bias);
}

absl::StatusOr<Executor::Output> Executor::Conv2dOut(const Conv2dPlan& plan,
                                                     const StoredTensor& x,
                                                     const StoredTensor& weight,
                                                     const StoredTensor* bias) {
  DeviceSlot& slot = SlotOf(x.device);
  Device& device = *x.device;
  const WindowDims& win = plan.window;
  const DType dtype = plan.dtype;
  const int64_t g = plan.groups, oc = plan.out_channels, oc_g = oc / g;
  const int64_t plane = win.oh * win.ow, cols = win.n * plane;
  const int64_t k = win.c / g * win.kh * win.kw;
  ASSIGN_OR_RETURN(Output out, AllocateOutput(slot, dtype, plan.out));
  if (out.shape.NumElements() == 0) return out;
  const Conv2dArgs library{win, g, oc, ConvPass::kForward, bias != nullptr};
  if (k > 0 &&
      device.Select(library, dtype) == Device::Implementation::kLibrary) {
    // The bias added in the same call; without one the weight stands in.
    RETURN_IF_ERROR(LibraryCall(
        slot, library, dtype,
        {RefOf(x), RefOf(weight), RefOf(bias != nullptr ? *bias : weight)},
        out.ref()));
    return out;
  }
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
  RETURN_IF_ERROR(AddChannelBias(device, out, bias, win, oc));
  return out;
}

absl::Status Executor::AddChannelBias(Device& device, const Output& out,
                                      const StoredTensor* bias,
                                      const WindowDims& win, int64_t oc) {
  if (bias == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(TensorRef y, As(out.ref(), {win.n, oc, win.oh * win.ow}));
  ASSIGN_OR_RETURN(TensorRef b, As(RefOf(*bias), {oc, 1}));
  return device.Launch({BinaryArgs{BinaryOp::kAdd}, {y, b}, y});
}

absl::Status Executor::LibraryCall(DeviceSlot& slot, const KernelArgs& args,
                                   DType dtype, std::vector<TensorRef> operands,
                                   TensorRef out) {
  ASSIGN_OR_RETURN(const uint64_t bytes,
                   slot.device->WorkspaceBytes(args, dtype));
  // Admitted and allocated as any buffer: the library allocates nothing.
  ASSIGN_OR_RETURN(Shape shape, Dims({static_cast<int64_t>(bytes)}));
  ASSIGN_OR_RETURN(Output workspace,
                   AllocateOutput(slot, DType::kBool, std::move(shape)));
  operands.push_back(workspace.ref());
  return slot.device->Launch({args, std::move(operands), out});
}

absl::StatusOr<Executor::Output> Executor::Pool2dOut(PoolKind kind,
                                                     const StoredTensor& x,
                                                     const WindowArgs& args) {
  ASSIGN_OR_RETURN(Pool2dPlan plan, PlanPool2d(kind, x.dtype, x.shape, args,
                                               TargetOf(*x.device)));
  return Pool2dOut(plan, kind, x, args);
}

absl::StatusOr<Executor::Output> Executor::Pool2dOut(const Pool2dPlan& plan,
                                                     PoolKind kind,
                                                     const StoredTensor& x,
                                                     const WindowArgs& args) {
  DeviceSlot& slot = SlotOf(x.device);
  Device& device = *x.device;
  const WindowDims& win = plan.window;
  const int64_t plane = win.oh * win.ow, cols = win.n * plane;
  const int64_t window = win.kh * win.kw;
  ASSIGN_OR_RETURN(Output out, AllocateOutput(slot, x.dtype, plan.out));
  if (out.shape.NumElements() == 0) return out;
  const Pool2dArgs library{win, PoolAlgorithmOf(kind, args),
                           PoolPass::kForward};
  if (device.Select(library, x.dtype) == Device::Implementation::kLibrary) {
    RETURN_IF_ERROR(
        LibraryCall(slot, library, x.dtype, {RefOf(x), RefOf(x)}, out.ref()));
    return out;
  }
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
    ASSIGN_OR_RETURN(Output count, WindowCounts(slot, win, x.dtype));
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

absl::StatusOr<Executor::Output> Executor::WindowCounts(DeviceSlot& slot,
                                                        const WindowDims& win,
                                                        DType dtype) {
  // Each window's count of elements inside the input: the sum of the ones
  // the same window sees in an all-ones plane.
  Device& device = *slot.device;
  const int64_t plane = win.oh * win.ow, window = win.kh * win.kw;
  WindowDims one = win;
  one.n = 1;
  one.c = 1;
  ASSIGN_OR_RETURN(Shape ones_shape, Dims({1, 1, win.h, win.w}));
  ASSIGN_OR_RETURN(Output ones,
                   AllocateOutput(slot, dtype, std::move(ones_shape)));
  FillSpec fill;
  fill.kind = FillSpec::Kind::kOnes;
  RETURN_IF_ERROR(device.Launch({fill, {}, ones.ref()}));
  ASSIGN_OR_RETURN(Shape seen_shape, Dims({window, plane}));
  ASSIGN_OR_RETURN(Output seen,
                   AllocateOutput(slot, dtype, std::move(seen_shape)));
  RETURN_IF_ERROR(
      device.Launch({Im2ColArgs{one, 0}, {ones.ref()}, seen.ref()}));
  ASSIGN_OR_RETURN(Shape count_shape, Dims({plane}));
  ASSIGN_OR_RETURN(Output count,
                   AllocateOutput(slot, dtype, std::move(count_shape)));
  RETURN_IF_ERROR(device.Launch({ReduceArgs{ReduceOp::kSum, {1, window, plane}},
                                 {seen.ref()},
                                 count.ref()}));
  return count;
}

absl::StatusOr<Executor::TensorPtr> Executor::AveragingMatrix(
    DeviceSlot& slot, int64_t out, int64_t in, bool transposed, DType dtype) {
  // Built in float64 on the host, cast on the device.
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
  RETURN_IF_ERROR(slot.device->CopyFromHost(m.data(), *wide.buffer, 0,
                                            m.size() * sizeof(double)));
  TensorPtr matrix = Stored(slot, std::move(wide));
  if (dtype == DType::kFloat64) return matrix;
  ASSIGN_OR_RETURN(Output narrow, CastOut(*matrix, dtype));
  return Stored(slot, std::move(narrow));
}

absl::StatusOr<Executor::Output> Executor::AdaptiveAvgPool2dOut(
    const StoredTensor& x, const std::vector<int64_t>& output_size) {
  ASSIGN_OR_RETURN(AdaptivePoolPlan plan,
                   PlanAdaptiveAvgPool2d(x.dtype, x.shape, output_size,
                                         TargetOf(*x.device)));
  return AdaptiveAvgPool2dOut(std::move(plan), x);
}

absl::StatusOr<Executor::Output> Executor::AdaptiveAvgPool2dOut(
    AdaptivePoolPlan plan, const StoredTensor& x) {
  DeviceSlot& slot = SlotOf(x.device);
  if (plan.out.NumElements() == 0) {
    return AllocateOutput(slot, x.dtype, std::move(plan.out));
  }
  ASSIGN_OR_RETURN(TensorPtr rows,
                   AveragingMatrix(slot, plan.oh, plan.h, false, x.dtype));
  ASSIGN_OR_RETURN(TensorPtr cols,
                   AveragingMatrix(slot, plan.ow, plan.w, true, x.dtype));
  ASSIGN_OR_RETURN(TensorPtr planes, ViewOf(x, {plan.planes, plan.h, plan.w}));
  ASSIGN_OR_RETURN(Output tall, MatMulOut(*rows, *planes));  // [p, oh, w]
  const TensorPtr y = Stored(slot, std::move(tall));
  ASSIGN_OR_RETURN(Output out, MatMulOut(*y, *cols));  // [p, oh, ow]
  out.shape = std::move(plan.out);
  return out;
}

// --- Backward ----------------------------------------------------------------
//
// The gradient g of a window op's result is read channel-major, [c, n*oh*ow]
// like the columns; the input's gradient is col2im of the columns' gradient
// (KernelKind::kCol2Im, the adjoint of im2col).

namespace {

using TensorPtr = std::shared_ptr<const StoredTensor>;

// g [n, ch, oh, ow] (or [ch, oh, ow]) read as [ch, n * oh * ow]. (Math is
// Executor::GradMath, deduced.)
template <typename Math>
absl::StatusOr<TensorPtr> ChannelMajor(Math& m, const TensorPtr& g,
                                       const WindowDims& win,
                                       int64_t channels) {
  const int64_t plane = win.oh * win.ow;
  ASSIGN_OR_RETURN(TensorPtr g3,
                   m.Reshape(g, {win.n, channels, plane}));
  if (win.n > 1) {
    const int64_t perm[] = {1, 0, 2};
    ASSIGN_OR_RETURN(g3, m.Permute(g3, perm));
  }
  return m.Reshape(g3, {channels, win.n * plane});
}

// col2im of `cols` ([c, kh, kw, n, oh, ow]) as a tensor of `shape`.
template <typename Math>
absl::StatusOr<TensorPtr> FoldColumns(Math& m, const TensorPtr& cols,
                                      const WindowDims& win,
                                      const Shape& shape) {
  ASSIGN_OR_RETURN(TensorPtr gx, m.Zeros(shape, cols->dtype));
  ASSIGN_OR_RETURN(TensorRef out, As(RefOf(*gx), {win.n, win.c, win.h, win.w}));
  RETURN_IF_ERROR(m.device().Launch({Col2ImArgs{win}, {RefOf(*cols)}, out}));
  return gx;
}

}  // namespace
absl::StatusOr<std::vector<Executor::TensorPtr>> Executor::Conv2dGrads(
    const GradNode& node, const TensorPtr& g) {
  const TensorPtr& x = node.inputs[0].data;
  const TensorPtr& w = node.inputs[1].data;
  const bool with_bias = node.inputs.size() > 2;
  GradMath m(*this, g->device);
  // The forward's plan (the row saves it): nothing is planned again.
  const Conv2dPlan& plan = std::get<Conv2dPlan>(node.plan);
  const Conv2dArgs library_args{plan.window, plan.groups, plan.out_channels,
                                ConvPass::kForward};
  const bool library = m.device().Select(library_args, plan.dtype) ==
                       Device::Implementation::kLibrary;
  // One library call per gradient, into a new tensor.
  auto library_pass = [&](ConvPass pass, const StoredTensor& a,
                          const StoredTensor& b,
                          const Shape& shape) -> absl::StatusOr<TensorPtr> {
    ASSIGN_OR_RETURN(Output grad, AllocateOutput(m.slot(), plan.dtype, shape));
    Conv2dArgs args = library_args;
    args.pass = pass;
    // The third operand, a forward's bias, is unread here.
    RETURN_IF_ERROR(LibraryCall(m.slot(), args, plan.dtype,
                                {RefOf(a), RefOf(b), RefOf(b)}, grad.ref()));
    return Stored(m.slot(), std::move(grad));
  };
  const WindowDims& win = plan.window;
  const int64_t gr = plan.groups, oc = plan.out_channels, oc_g = oc / gr;
  const int64_t cols = win.n * win.oh * win.ow;
  const int64_t k = win.c / gr * win.kh * win.kw;
  std::vector<TensorPtr> out(node.inputs.size());
  const int64_t swap[] = {0, 2, 1};
  if (node.next[0].active()) {  // col2im(w^T g) per group
    if (k == 0) {
      ASSIGN_OR_RETURN(out[0], m.Zeros(x->shape, plan.dtype));
    } else if (library) {
      ASSIGN_OR_RETURN(out[0], library_pass(ConvPass::kBackwardData, *g, *w,
                                            x->shape));
    } else {
      // g as [groups, oc / groups, n * oh * ow].
      ASSIGN_OR_RETURN(TensorPtr gcm, ChannelMajor(m, g, win, oc));
      ASSIGN_OR_RETURN(gcm, m.Reshape(gcm, {gr, oc_g, cols}));
      ASSIGN_OR_RETURN(TensorPtr wg, m.Reshape(w, {gr, oc_g, k}));
      ASSIGN_OR_RETURN(TensorPtr wt, m.Permute(wg, swap));
      ASSIGN_OR_RETURN(TensorPtr dcols, m.MatMul(wt, gcm));
      ASSIGN_OR_RETURN(out[0], FoldColumns(m, dcols, win, x->shape));
    }
  }
  if (node.next[1].active()) {  // (cols g^T)^T per group
    if (k == 0) {
      ASSIGN_OR_RETURN(out[1], m.Zeros(w->shape, plan.dtype));
    } else if (library) {
      ASSIGN_OR_RETURN(out[1], library_pass(ConvPass::kBackwardWeights, *x,
                                            *g, w->shape));
    } else {
      // The columns [g, K, n*oh*ow] times g read as [g, n*oh*ow, oc/g]
      // (a permute of g, not of the far larger columns), then the small
      // [g, K, oc/g] result transposed.
      ASSIGN_OR_RETURN(Shape shape, Dims({gr, k, cols}));
      ASSIGN_OR_RETURN(Output unfolded,
                       AllocateOutput(m.slot(), x->dtype, std::move(shape)));
      RETURN_IF_ERROR(m.device().Launch(
          {Im2ColArgs{win, 0}, {RefOf(*x)}, unfolded.ref()}));
      const TensorPtr columns = Stored(m.slot(), std::move(unfolded));
      ASSIGN_OR_RETURN(TensorPtr g4,
                       m.Reshape(g, {win.n, gr, oc_g, win.oh * win.ow}));
      const int64_t rows_first[] = {1, 0, 3, 2};
      ASSIGN_OR_RETURN(TensorPtr gt, m.Permute(g4, rows_first));
      ASSIGN_OR_RETURN(gt, m.Reshape(gt, {gr, cols, oc_g}));
      ASSIGN_OR_RETURN(TensorPtr gwt, m.MatMul(columns, gt));  // [g, K, oc/g]
      ASSIGN_OR_RETURN(TensorPtr gw, m.Permute(gwt, swap));
      ASSIGN_OR_RETURN(out[1], m.Reshape(gw, w->shape));
    }
  }
  if (with_bias && node.next[2].active()) {  // g summed but for channels
    // One sum over dims {0, 2}: the reducer runs it one run of adjacent
    // dims at a time, no permute (ReducePlan::stages).
    ASSIGN_OR_RETURN(TensorPtr g3, m.Reshape(g, {win.n, oc, win.oh * win.ow}));
    const int64_t batch_and_plane[] = {0, 2};
    ASSIGN_OR_RETURN(out[2], m.Sum(g3, batch_and_plane, false));
  }
  return out;
}

absl::StatusOr<std::vector<Executor::TensorPtr>> Executor::Pool2dGrads(
    const GradNode& node, const TensorPtr& g) {
  const TensorPtr& x = node.inputs[0].data;
  GradMath m(*this, g->device);
  std::vector<TensorPtr> out(1);
  if (node.op.kind == OpSpec::Kind::kAdaptiveAvgPool2d) {
    // y = rows . x . cols per plane, so gx = rows^T . g . cols^T.
    const AdaptivePoolPlan& plan = std::get<AdaptivePoolPlan>(node.plan);
    ASSIGN_OR_RETURN(TensorPtr rows_t, AveragingMatrix(m.slot(), plan.oh,
                                                       plan.h, true, g->dtype));
    ASSIGN_OR_RETURN(TensorPtr cols_t, AveragingMatrix(m.slot(), plan.ow,
                                                       plan.w, false, g->dtype));
    ASSIGN_OR_RETURN(TensorPtr g3, m.Reshape(g, {plan.planes, plan.oh, plan.ow}));
    ASSIGN_OR_RETURN(TensorPtr tall, m.MatMul(rows_t, g3));  // [p, h, ow]
    ASSIGN_OR_RETURN(TensorPtr gx, m.MatMul(tall, cols_t));  // [p, h, w]
    ASSIGN_OR_RETURN(out[0], m.Reshape(gx, x->shape));
    return out;
  }
  const PoolKind kind = PoolKindOf(node.op);
  const Pool2dPlan& plan = std::get<Pool2dPlan>(node.plan);
  const WindowDims& win = plan.window;
  const int64_t plane = win.oh * win.ow, cols = win.n * plane;
  const int64_t window = win.kh * win.kw;
  if (x->shape.NumElements() == 0) {
    ASSIGN_OR_RETURN(out[0], m.Zeros(x->shape, g->dtype));
    return out;
  }
  const Pool2dArgs library{win, PoolAlgorithmOf(kind, node.op.window),
                           PoolPass::kBackward};
  if (m.device().Select(library, g->dtype) ==
      Device::Implementation::kLibrary) {
    ASSIGN_OR_RETURN(Output gx, AllocateOutput(m.slot(), g->dtype, x->shape));
    // Average pooling saves no x (its row): g stands in, unread.
    const StoredTensor& seen = kind == PoolKind::kMax ? *x : *g;
    RETURN_IF_ERROR(LibraryCall(m.slot(), library, g->dtype,
                                {RefOf(*g), RefOf(seen)}, gx.ref()));
    out[0] = Stored(m.slot(), std::move(gx));
    return out;
  }
  ASSIGN_OR_RETURN(TensorPtr gcm, ChannelMajor(m, g, win, win.c));
  ASSIGN_OR_RETURN(Shape cols_shape, Dims({win.c, window, cols}));
  TensorPtr dcols;
  if (kind == PoolKind::kMax) {
    // The gradient goes to each window's first maximum (PyTorch's index).
    ASSIGN_OR_RETURN(Output unfolded,
                     AllocateOutput(m.slot(), x->dtype, cols_shape));
    RETURN_IF_ERROR(m.device().Launch(
        {Im2ColArgs{win, NegativeInfinityBits(x->dtype)},
         {RefOf(*x)},
         unfolded.ref()}));
    ASSIGN_OR_RETURN(Shape index_shape, Dims({win.c, 1, cols}));
    ASSIGN_OR_RETURN(Output index,
                     AllocateOutput(m.slot(), DType::kInt64, index_shape));
    RETURN_IF_ERROR(m.device().Launch(
        {ReduceArgs{ReduceOp::kArgmax, {win.c, window, cols}},
         {unfolded.ref()},
         index.ref()}));
    unfolded = Output{};
    ASSIGN_OR_RETURN(Shape positions_shape, Dims({window, 1}));
    ASSIGN_OR_RETURN(Output positions,
                     AllocateOutput(m.slot(), DType::kInt64, positions_shape));
    FillSpec arange;
    arange.kind = FillSpec::Kind::kArange;
    RETURN_IF_ERROR(m.device().Launch({arange, {}, positions.ref()}));
    ASSIGN_OR_RETURN(TensorPtr hit,
                     m.Bin(BinaryOp::kEq, Stored(m.slot(), std::move(positions)),
                           Stored(m.slot(), std::move(index))));
    ASSIGN_OR_RETURN(TensorPtr g3, m.Reshape(gcm, {win.c, 1, cols}));
    using Bound = OpSpec::Bound;  // g where the window's maximum is, else 0
    ASSIGN_OR_RETURN(
        dcols, m.Keep(WhereOut(*hit, Bound{Bound::Kind::kTensor, {}}, g3.get(),
                               Bound{Bound::Kind::kScalar, Scalar::Float(0)},
                               nullptr)));
  } else {
    // Each window's elements share its gradient over its divisor.
    TensorPtr share;
    if (node.op.window.count_include_pad) {
      ASSIGN_OR_RETURN(share, m.Num(BinaryOp::kDiv, gcm,
                                    static_cast<double>(window)));
    } else {
      ASSIGN_OR_RETURN(Output counts, WindowCounts(m.slot(), win, g->dtype));
      ASSIGN_OR_RETURN(TensorPtr per, m.Reshape(gcm, {win.c * win.n, plane}));
      ASSIGN_OR_RETURN(share, m.Bin(BinaryOp::kDiv, per,
                                    Stored(m.slot(), std::move(counts))));
    }
    ASSIGN_OR_RETURN(share, m.Reshape(share, {win.c, 1, cols}));
    ASSIGN_OR_RETURN(dcols, m.Expand(share, cols_shape));
  }
  ASSIGN_OR_RETURN(out[0], FoldColumns(m, dcols, win, x->shape));
  return out;
}

}  // namespace tensord::core
