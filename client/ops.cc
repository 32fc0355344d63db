// Tensor ops (each on the session's command stream when it is pipelined,
// else one Run RPC: RunOp), the free functions linear/cat, and Batch (one
// Execute RPC per list).
#include <string>
#include <utility>
#include <vector>

#include "client/grpc_enums.h"
#include "client/grpc_ops.h"
#include "client/grpc_session.h"
#include "tensord/client.h"

namespace tensord::client {
namespace internal {
namespace {

// The tensors HandleOperand made operands of, on this thread, since the
// last op was sent: the op must run in the session of every one of them.
struct OperandOrigin {
  uint64_t handle = 0;
  std::weak_ptr<const TensorState> state;
};
thread_local std::vector<OperandOrigin> t_operand_origins;
constexpr size_t kMaxOperandOrigins = 1024;  // left by ops that never ran

// Throws when `op`, about to run in `first`'s session, names a tensor of
// another session: PyTorch's same-device error with both devices when the
// two are nodes of one cluster (their devices are named by node),
// INVALID_ARGUMENT otherwise.
void CheckOneSession(const TensorState& first, const v1::Op& op) {
  struct Forget {
    ~Forget() { t_operand_origins.clear(); }  // keeps the capacity
  } forget;
  for (const OperandOrigin& origin : t_operand_origins) {
    std::shared_ptr<const TensorState> other = origin.state.lock();
    if (other == nullptr || other->session == first.session) continue;
    const bool named = AnyOperand(op, [&](const v1::Operand& o) {
      return o.has_handle() && o.handle() == origin.handle;
    });
    if (!named) continue;  // an earlier op's
    if (!first.session->node_prefix().empty() &&
        !other->session->node_prefix().empty()) {
      throw Error(StatusCode::FAILED_PRECONDITION,
                  "Expected all tensors to be on the same device, but found "
                  "at least two devices, " +
                      first.device.str() + " and " + other->device.str() +
                      "!");
    }
    throw Error(StatusCode::INVALID_ARGUMENT,
                "tensor " + std::to_string(other->handle) +
                    " belongs to another Client's session: an op takes the "
                    "tensors of one Client (one session on one server)");
  }
}

}  // namespace

v1::Operand HandleOperand(const Tensor& t) {
  v1::Operand o;
  o.set_handle(t.handle());
  if (t_operand_origins.size() >= kMaxOperandOrigins) t_operand_origins.clear();
  t_operand_origins.push_back({t.handle(), TensorAccess::State(t)});
  return o;
}

v1::Scalar ToProto(const Scalar& s) {
  v1::Scalar out;
  if (s.is_integral()) {
    out.set_int_value(s.int_value());
  } else {
    out.set_float_value(s.float_value());
  }
  return out;
}

v1::Op BinaryOpMsg(BinaryOp op, v1::Operand a, v1::Operand b) {
  v1::Op m;
  v1::BinaryArgs* args = m.mutable_binary();
  args->set_op(ToProto(op));
  *args->mutable_lhs() = std::move(a);
  *args->mutable_rhs() = std::move(b);
  return m;
}

v1::Op BinaryOpMsg(BinaryOp op, v1::Operand a, const Scalar& b,
                   bool scalar_first) {
  v1::Op m;
  v1::BinaryArgs* args = m.mutable_binary();
  args->set_op(ToProto(op));
  *args->mutable_lhs() = std::move(a);
  *args->mutable_scalar() = ToProto(b);
  args->set_scalar_first(scalar_first);
  return m;
}

UnaryOp GeluOp(std::string_view approximate) {
  if (approximate == "none") return UnaryOp::kGelu;
  if (approximate == "tanh") return UnaryOp::kGeluTanh;
  // PyTorch's message (F.gelu).
  throw Error(StatusCode::INVALID_ARGUMENT,
              "approximate argument must be either none or tanh.");
}

v1::Op UnaryOpMsg(UnaryOp op, v1::Operand x,
                  std::initializer_list<double> args) {
  v1::Op m;
  m.mutable_unary()->set_op(ToProto(op));
  *m.mutable_unary()->mutable_x() = std::move(x);
  m.mutable_unary()->mutable_args()->Add(args.begin(), args.end());
  return m;
}

v1::Op ReduceOpMsg(ReduceOp op, v1::Operand x, std::optional<int64_t> dim,
                   bool keepdim) {
  v1::Op m;
  v1::ReduceArgs* args = m.mutable_reduce();
  args->set_op(ToProto(op));
  *args->mutable_x() = std::move(x);
  if (dim.has_value()) args->set_dim(*dim);
  args->set_keepdim(keepdim);
  return m;
}

v1::Op ReduceOpMsg(ReduceOp op, v1::Operand x, std::span<const int64_t> dims,
                   bool keepdim) {
  v1::Op m = ReduceOpMsg(op, std::move(x), std::nullopt, keepdim);
  m.mutable_reduce()->mutable_dims()->Add(dims.begin(), dims.end());
  return m;
}

v1::Op WhereOpMsg(v1::Operand cond, OperandOrNumber input,
                  OperandOrNumber other) {
  v1::Op m;
  v1::WhereArgs* args = m.mutable_where();
  *args->mutable_condition() = std::move(cond);
  if (auto* t = std::get_if<v1::Operand>(&input)) {
    *args->mutable_input() = std::move(*t);
  } else {
    *args->mutable_input_scalar() = ToProto(std::get<Scalar>(input));
  }
  if (auto* t = std::get_if<v1::Operand>(&other)) {
    *args->mutable_other() = std::move(*t);
  } else {
    *args->mutable_other_scalar() = ToProto(std::get<Scalar>(other));
  }
  return m;
}

v1::Op Conv2dOpMsg(v1::Operand x, v1::Operand w,
                   std::optional<v1::Operand> bias,
                   const Conv2dOptions& options) {
  v1::Op m;
  v1::Conv2dArgs* args = m.mutable_conv2d();
  *args->mutable_x() = std::move(x);
  *args->mutable_weight() = std::move(w);
  if (bias.has_value()) *args->mutable_bias() = std::move(*bias);
  args->mutable_stride()->Add(options.stride.begin(), options.stride.end());
  args->mutable_padding()->Add(options.padding.begin(), options.padding.end());
  args->mutable_dilation()->Add(options.dilation.begin(),
                                options.dilation.end());
  args->set_groups(options.groups);
  return m;
}

v1::Op Pool2dOpMsg(v1::PoolOp op, v1::Operand x,
                   const std::vector<int64_t>& kernel_size,
                   const Pool2dOptions& options) {
  v1::Op m;
  v1::Pool2dArgs* args = m.mutable_pool2d();
  args->set_op(op);
  *args->mutable_x() = std::move(x);
  args->mutable_kernel_size()->Add(kernel_size.begin(), kernel_size.end());
  args->mutable_stride()->Add(options.stride.begin(), options.stride.end());
  args->mutable_padding()->Add(options.padding.begin(), options.padding.end());
  args->mutable_dilation()->Add(options.dilation.begin(),
                                options.dilation.end());
  args->set_exclude_pad(!options.count_include_pad);
  return m;
}

v1::Op AdaptiveAvgPool2dOpMsg(v1::Operand x,
                              const std::vector<int64_t>& output_size) {
  v1::Op m;
  v1::Pool2dArgs* args = m.mutable_pool2d();
  args->set_op(v1::ADAPTIVE_AVG_POOL);
  *args->mutable_x() = std::move(x);
  args->mutable_output_size()->Add(output_size.begin(), output_size.end());
  return m;
}

v1::Op DropoutOpMsg(v1::Operand x, double p, bool training,
                    std::optional<uint64_t> seed) {
  v1::Op m;
  v1::DropoutArgs* args = m.mutable_dropout();
  *args->mutable_x() = std::move(x);
  args->set_p(p);
  args->set_training(training);
  if (seed.has_value()) args->set_seed(*seed);
  return m;
}

v1::Op LossOpMsg(v1::LossOp op, v1::Operand input, v1::Operand target,
                 Reduction reduction, int64_t ignore_index) {
  v1::Op m;
  v1::LossArgs* args = m.mutable_loss();
  args->set_op(op);
  *args->mutable_input() = std::move(input);
  *args->mutable_target() = std::move(target);
  switch (reduction) {
    case Reduction::kMean:
      args->set_reduction(v1::REDUCTION_MEAN);
      break;
    case Reduction::kSum:
      args->set_reduction(v1::REDUCTION_SUM);
      break;
    case Reduction::kNone:
      args->set_reduction(v1::REDUCTION_NONE);
      break;
  }
  if (op != v1::MSE_LOSS) args->set_ignore_index(ignore_index);
  return m;
}

v1::Op SoftmaxOpMsg(v1::Operand x, int64_t dim, bool log) {
  v1::Op m;
  v1::SoftmaxArgs* args = m.mutable_softmax();
  *args->mutable_x() = std::move(x);
  args->set_dim(dim);
  args->set_log(log);
  return m;
}

v1::Op ClampOpMsg(v1::Operand x, const std::optional<Scalar>& min,
                  const std::optional<Scalar>& max) {
  v1::Op m;
  v1::ClampArgs* args = m.mutable_clamp();
  *args->mutable_x() = std::move(x);
  if (min.has_value()) *args->mutable_min_scalar() = ToProto(*min);
  if (max.has_value()) *args->mutable_max_scalar() = ToProto(*max);
  return m;
}

v1::Op ClampOpMsg(v1::Operand x, std::optional<v1::Operand> min,
                  std::optional<v1::Operand> max) {
  v1::Op m;
  v1::ClampArgs* args = m.mutable_clamp();
  *args->mutable_x() = std::move(x);
  if (min.has_value()) *args->mutable_min() = std::move(*min);
  if (max.has_value()) *args->mutable_max() = std::move(*max);
  return m;
}

v1::Op MatMulOpMsg(v1::Operand a, v1::Operand b) {
  v1::Op m;
  *m.mutable_matmul()->mutable_lhs() = std::move(a);
  *m.mutable_matmul()->mutable_rhs() = std::move(b);
  return m;
}

v1::Op LinearOpMsg(v1::Operand x, v1::Operand w,
                   std::optional<v1::Operand> bias) {
  v1::Op m;
  *m.mutable_linear()->mutable_x() = std::move(x);
  *m.mutable_linear()->mutable_weight() = std::move(w);
  if (bias.has_value()) *m.mutable_linear()->mutable_bias() = std::move(*bias);
  return m;
}

v1::Op TransposeOpMsg(v1::Operand x, int64_t dim0, int64_t dim1) {
  v1::Op m;
  *m.mutable_transpose()->mutable_x() = std::move(x);
  m.mutable_transpose()->set_dim0(dim0);
  m.mutable_transpose()->set_dim1(dim1);
  return m;
}

v1::Op PermuteOpMsg(v1::Operand x, const std::vector<int64_t>& dims) {
  v1::Op m;
  *m.mutable_permute()->mutable_x() = std::move(x);
  m.mutable_permute()->mutable_dims()->Add(dims.begin(), dims.end());
  return m;
}

v1::Op ReshapeOpMsg(v1::Operand x, const std::vector<int64_t>& shape) {
  v1::Op m;
  *m.mutable_reshape()->mutable_x() = std::move(x);
  m.mutable_reshape()->mutable_shape()->Add(shape.begin(), shape.end());
  return m;
}

v1::Op NarrowOpMsg(v1::Operand x, int64_t dim, int64_t start, int64_t length) {
  v1::Op m;
  *m.mutable_narrow()->mutable_x() = std::move(x);
  m.mutable_narrow()->set_dim(dim);
  m.mutable_narrow()->set_start(start);
  m.mutable_narrow()->set_length(length);
  return m;
}

v1::Op SelectOpMsg(v1::Operand x, int64_t dim, int64_t index) {
  v1::Op m;
  *m.mutable_select()->mutable_x() = std::move(x);
  m.mutable_select()->set_dim(dim);
  m.mutable_select()->set_index(index);
  return m;
}

v1::Op CatOpMsg(std::vector<v1::Operand> xs, int64_t dim) {
  v1::Op m;
  for (v1::Operand& x : xs) *m.mutable_cat()->add_xs() = std::move(x);
  m.mutable_cat()->set_dim(dim);
  return m;
}

v1::Op CastOpMsg(v1::Operand x, DType dtype) {
  v1::Op m;
  *m.mutable_cast()->mutable_x() = std::move(x);
  m.mutable_cast()->set_dtype(DTypeToProto(dtype));
  return m;
}

v1::Op InPlaceOpMsg(v1::InPlaceOp op, v1::Operand target,
                    const v1::Operand* other, const Scalar* scalar,
                    const Scalar* alpha) {
  v1::Op m;
  v1::InPlaceArgs* args = m.mutable_in_place();
  args->set_op(op);
  *args->mutable_target() = std::move(target);
  if (other != nullptr) *args->mutable_other() = *other;
  if (scalar != nullptr) *args->mutable_scalar() = ToProto(*scalar);
  if (alpha != nullptr) *args->mutable_alpha() = ToProto(*alpha);
  return m;
}

Tensor RunOp(const Tensor& t, v1::Op op) {
  MarkGradMode(op);
  const std::shared_ptr<const TensorState>& state = TensorAccess::State(t);
  CheckOneSession(*state, op);
  std::shared_ptr<const TensorState> result;
  if (state->session->RunOnStream(op, &result)) {
    return TensorAccess::Make(std::move(result));
  }
  v1::RunRequest request;
  *request.mutable_op() = std::move(op);
  return TensorAccess::Make(
      state->session->MakeTensor(&v1::TensorService::Stub::Run, request));
}

Tensor& RunInPlace(Tensor& target, v1::InPlaceOp op, const Tensor* other,
                   const Scalar* scalar, const Scalar* alpha) {
  const v1::Operand other_operand =
      other != nullptr ? HandleOperand(*other) : v1::Operand();
  RunOnTarget(target, InPlaceOpMsg(op, HandleOperand(target),
                                   other != nullptr ? &other_operand : nullptr,
                                   scalar, alpha));
  return target;
}

Tensor ZerosLike(const Tensor& t) {
  v1::CreateRequest request;
  request.set_device(t.device().str());
  request.set_dtype(DTypeToProto(t.dtype()));
  request.mutable_shape()->Add(t.shape().begin(), t.shape().end());
  request.mutable_fill()->set_kind(v1::Fill::ZEROS);
  const std::shared_ptr<const Session>& session = TensorAccess::State(t)->session;
  std::shared_ptr<const TensorState> made;
  if (session->CreateOnStream(request, &made)) {
    return TensorAccess::Make(std::move(made));
  }
  return TensorAccess::Make(
      session->MakeTensor(&v1::TensorService::Stub::Create, std::move(request)));
}

Tensor FromBytesLike(const Tensor& t, std::string_view bytes) {
  const std::shared_ptr<const Session>& session = TensorAccess::State(t)->session;
  return TensorAccess::Make(session->Adopt(session->CreateFromBytes(
      DTypeToProto(t.dtype()), t.shape(), bytes, t.device().str())));
}

void RunOnTarget(const Tensor& target, v1::Op op) {
  MarkGradMode(op);
  CheckOneSession(*TensorAccess::State(target), op);
  v1::RunRequest request;
  *request.mutable_op() = std::move(op);
  // The result is the target itself (same handle, same metadata).
  const std::shared_ptr<const Session>& session =
      TensorAccess::State(target)->session;
  std::shared_ptr<const TensorState> unused;
  if (!session->RunOnStream(request.op(), &unused)) {
    session->Call(&v1::TensorService::Stub::Run, std::move(request));
  }
}

}  // namespace internal

using internal::HandleOperand;
using internal::RunInPlace;
using internal::RunOp;

Tensor Tensor::binary(BinaryOp op, const Tensor& other) const {
  return RunOp(*this, internal::BinaryOpMsg(op, HandleOperand(*this),
                                            HandleOperand(other)));
}

Tensor Tensor::binary(BinaryOp op, Scalar other) const {
  return RunOp(*this, internal::BinaryOpMsg(op, HandleOperand(*this), other));
}

Tensor operator+(const Tensor& a, const Tensor& b) {
  return a.binary(BinaryOp::kAdd, b);
}
Tensor operator-(const Tensor& a, const Tensor& b) {
  return a.binary(BinaryOp::kSub, b);
}
Tensor operator*(const Tensor& a, const Tensor& b) {
  return a.binary(BinaryOp::kMul, b);
}
Tensor operator/(const Tensor& a, const Tensor& b) {
  return a.binary(BinaryOp::kDiv, b);
}
Tensor operator+(const Tensor& a, Scalar b) {
  return a.binary(BinaryOp::kAdd, b);
}
Tensor operator-(const Tensor& a, Scalar b) {
  return a.binary(BinaryOp::kSub, b);
}
Tensor operator*(const Tensor& a, Scalar b) {
  return a.binary(BinaryOp::kMul, b);
}
Tensor operator/(const Tensor& a, Scalar b) {
  return a.binary(BinaryOp::kDiv, b);
}
Tensor operator+(Scalar a, const Tensor& b) {
  return b.binary(BinaryOp::kAdd, a);
}
Tensor operator*(Scalar a, const Tensor& b) {
  return b.binary(BinaryOp::kMul, a);
}
Tensor operator-(Scalar a, const Tensor& b) {
  return RunOp(b, internal::BinaryOpMsg(BinaryOp::kSub, HandleOperand(b), a,
                                        /*scalar_first=*/true));
}
Tensor operator/(Scalar a, const Tensor& b) {
  return RunOp(b, internal::BinaryOpMsg(BinaryOp::kDiv, HandleOperand(b), a,
                                        /*scalar_first=*/true));
}

Tensor Tensor::unary(UnaryOp op, std::initializer_list<double> args) const {
  return RunOp(*this, internal::UnaryOpMsg(op, HandleOperand(*this), args));
}

Tensor Tensor::unary(UnaryOp op) const {
  return RunOp(*this, internal::UnaryOpMsg(op, HandleOperand(*this)));
}

Tensor Tensor::gelu(std::string_view approximate) const {
  return unary(internal::GeluOp(approximate));
}

Tensor Tensor::reduce(ReduceOp op, std::optional<int64_t> dim,
                      bool keepdim) const {
  return RunOp(*this,
               internal::ReduceOpMsg(op, HandleOperand(*this), dim, keepdim));
}

Tensor Tensor::reduce(ReduceOp op, std::span<const int64_t> dims,
                      bool keepdim) const {
  return RunOp(*this,
               internal::ReduceOpMsg(op, HandleOperand(*this), dims, keepdim));
}

Tensor Tensor::softmax(int64_t dim) const {
  return RunOp(*this, internal::SoftmaxOpMsg(HandleOperand(*this), dim, false));
}

Tensor Tensor::log_softmax(int64_t dim) const {
  return RunOp(*this, internal::SoftmaxOpMsg(HandleOperand(*this), dim, true));
}

Tensor Tensor::clamp(std::optional<Scalar> min,
                     std::optional<Scalar> max) const {
  return RunOp(*this, internal::ClampOpMsg(HandleOperand(*this), min, max));
}

Tensor Tensor::clamp(const std::optional<Tensor>& min,
                     const std::optional<Tensor>& max) const {
  std::optional<v1::Operand> lo, hi;
  if (min.has_value()) lo = HandleOperand(*min);
  if (max.has_value()) hi = HandleOperand(*max);
  return RunOp(*this, internal::ClampOpMsg(HandleOperand(*this), std::move(lo),
                                           std::move(hi)));
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  return RunOp(*this,
               internal::TransposeOpMsg(HandleOperand(*this), dim0, dim1));
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  return RunOp(*this, internal::PermuteOpMsg(HandleOperand(*this), dims));
}

Tensor Tensor::reshape(const std::vector<int64_t>& shape) const {
  return RunOp(*this, internal::ReshapeOpMsg(HandleOperand(*this), shape));
}

Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  return RunOp(*this,
               internal::NarrowOpMsg(HandleOperand(*this), dim, start, length));
}

Tensor Tensor::select(int64_t dim, int64_t index) const {
  return RunOp(*this, internal::SelectOpMsg(HandleOperand(*this), dim, index));
}

Tensor Tensor::to(DType dtype) const {
  return RunOp(*this, internal::CastOpMsg(HandleOperand(*this), dtype));
}

Tensor Tensor::matmul(const Tensor& other) const {
  return RunOp(
      *this, internal::MatMulOpMsg(HandleOperand(*this), HandleOperand(other)));
}

Tensor& Tensor::add_(const Tensor& o) {
  return RunInPlace(*this, v1::ADD_, &o, nullptr);
}
Tensor& Tensor::sub_(const Tensor& o) {
  return RunInPlace(*this, v1::SUB_, &o, nullptr);
}
Tensor& Tensor::mul_(const Tensor& o) {
  return RunInPlace(*this, v1::MUL_, &o, nullptr);
}
Tensor& Tensor::div_(const Tensor& o) {
  return RunInPlace(*this, v1::DIV_, &o, nullptr);
}
Tensor& Tensor::add_(Scalar o) {
  return RunInPlace(*this, v1::ADD_, nullptr, &o);
}
Tensor& Tensor::sub_(Scalar o) {
  return RunInPlace(*this, v1::SUB_, nullptr, &o);
}
Tensor& Tensor::mul_(Scalar o) {
  return RunInPlace(*this, v1::MUL_, nullptr, &o);
}
Tensor& Tensor::div_(Scalar o) {
  return RunInPlace(*this, v1::DIV_, nullptr, &o);
}
Tensor& Tensor::axpy_(Scalar alpha, const Tensor& x) {
  return RunInPlace(*this, v1::AXPY_, &x, nullptr, &alpha);
}

Tensor linear(const Tensor& x, const Tensor& weight,
              const std::optional<Tensor>& bias) {
  std::optional<v1::Operand> b;
  if (bias.has_value()) b = HandleOperand(*bias);
  return RunOp(x, internal::LinearOpMsg(HandleOperand(x), HandleOperand(weight),
                                        std::move(b)));
}

Tensor conv2d(const Tensor& x, const Tensor& weight,
              const std::optional<Tensor>& bias, const Conv2dOptions& options) {
  std::optional<v1::Operand> b;
  if (bias.has_value()) b = HandleOperand(*bias);
  return RunOp(x, internal::Conv2dOpMsg(HandleOperand(x), HandleOperand(weight),
                                        std::move(b), options));
}

Tensor max_pool2d(const Tensor& x, const std::vector<int64_t>& kernel_size,
                  const Pool2dOptions& options) {
  return RunOp(x, internal::Pool2dOpMsg(v1::MAX_POOL, HandleOperand(x),
                                        kernel_size, options));
}

Tensor avg_pool2d(const Tensor& x, const std::vector<int64_t>& kernel_size,
                  const Pool2dOptions& options) {
  return RunOp(x, internal::Pool2dOpMsg(v1::AVG_POOL, HandleOperand(x),
                                        kernel_size, options));
}

Tensor adaptive_avg_pool2d(const Tensor& x,
                           const std::vector<int64_t>& output_size) {
  return RunOp(x,
               internal::AdaptiveAvgPool2dOpMsg(HandleOperand(x), output_size));
}

Tensor dropout(const Tensor& x, double p, bool training,
               std::optional<uint64_t> seed) {
  return RunOp(x, internal::DropoutOpMsg(HandleOperand(x), p, training, seed));
}

Tensor nll_loss(const Tensor& input, const Tensor& target,
                Reduction reduction, int64_t ignore_index) {
  return RunOp(input, internal::LossOpMsg(v1::NLL_LOSS, HandleOperand(input),
                                          HandleOperand(target), reduction,
                                          ignore_index));
}

Tensor cross_entropy(const Tensor& input, const Tensor& target,
                     Reduction reduction, int64_t ignore_index) {
  return RunOp(input, internal::LossOpMsg(v1::CROSS_ENTROPY,
                                          HandleOperand(input),
                                          HandleOperand(target), reduction,
                                          ignore_index));
}

Tensor mse_loss(const Tensor& input, const Tensor& target,
                Reduction reduction) {
  return RunOp(input, internal::LossOpMsg(v1::MSE_LOSS, HandleOperand(input),
                                          HandleOperand(target), reduction,
                                          -100));
}

std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  return {x.max(dim, keepdim), x.argmax(dim, keepdim)};
}

std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  return {x.min(dim, keepdim), (-x).argmax(dim, keepdim)};
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  const int64_t rank = x.dim();
  if (rank == 0) return x.reshape({1});
  const int64_t start = start_dim < 0 ? start_dim + rank : start_dim;
  const int64_t end = end_dim < 0 ? end_dim + rank : end_dim;
  if (start < 0 || start >= rank || end < 0 || end >= rank) {
    throw Error(StatusCode::INVALID_ARGUMENT,
                "Dimension out of range (expected to be in range of [" +
                    std::to_string(-rank) + ", " + std::to_string(rank - 1) +
                    "], but got " +
                    std::to_string(start < 0 || start >= rank ? start_dim
                                                              : end_dim) +
                    ")");
  }
  if (start > end) {
    throw Error(StatusCode::INVALID_ARGUMENT,
                "flatten() has invalid args: start_dim cannot come after "
                "end_dim");
  }
  std::vector<int64_t> shape(x.shape().begin(), x.shape().begin() + start);
  shape.push_back(-1);
  shape.insert(shape.end(), x.shape().begin() + end + 1, x.shape().end());
  if (x.numel() == 0) {  // -1 cannot be inferred beside a zero
    int64_t merged = 1;
    for (int64_t d = start; d <= end; ++d) merged *= x.shape()[d];
    shape[start] = merged;
  }
  return x.reshape(shape);
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  if (tensors.empty()) {
    throw Error(StatusCode::INVALID_ARGUMENT,
                "cat expects a non-empty list of tensors");
  }
  std::vector<v1::Operand> xs;
  for (const Tensor& t : tensors) xs.push_back(HandleOperand(t));
  return RunOp(tensors[0], internal::CatOpMsg(std::move(xs), dim));
}

Tensor where(const Tensor& condition, const Tensor& input,
             const Tensor& other) {
  return RunOp(condition, internal::WhereOpMsg(HandleOperand(condition),
                                               HandleOperand(input),
                                               HandleOperand(other)));
}
Tensor where(const Tensor& condition, const Tensor& input, Scalar other) {
  return RunOp(condition, internal::WhereOpMsg(HandleOperand(condition),
                                               HandleOperand(input), other));
}
Tensor where(const Tensor& condition, Scalar input, const Tensor& other) {
  return RunOp(condition, internal::WhereOpMsg(HandleOperand(condition), input,
                                               HandleOperand(other)));
}
Tensor where(const Tensor& condition, Scalar input, Scalar other) {
  return RunOp(condition,
               internal::WhereOpMsg(HandleOperand(condition), input, other));
}

// --- Batch ------------------------------------------------------------------

namespace {

v1::Operand OperandOf(internal::BatchState& state, const Batch::Input& in,
                      const std::optional<Tensor>& tensor,
                      const std::optional<Batch::Value>& value) {
  (void)in;
  v1::Operand o;
  if (tensor.has_value()) {
    if (internal::TensorAccess::State(*tensor)->session != state.session) {
      throw Error(StatusCode::INVALID_ARGUMENT,
                  "batch input tensor belongs to another client's session");
    }
    state.inputs.push_back(*tensor);
    o.set_handle(tensor->handle());
  } else {
    o.set_result_of(value->index());
  }
  return o;
}

}  // namespace

Batch::Batch(std::shared_ptr<const internal::Session> session)
    : state_(std::make_shared<internal::BatchState>()) {
  state_->session = std::move(session);
}

Batch Client::batch() const { return Batch(session_); }

size_t Batch::size() const {
  return static_cast<size_t>(state_->request.ops_size());
}

Batch::Value Batch::Record(void* op) {
  v1::Op* recorded = state_->request.add_ops();
  recorded->Swap(static_cast<v1::Op*>(op));
  internal::MarkGradMode(*recorded);
  return Value(state_.get(), static_cast<uint32_t>(size() - 1));
}

#define TENSORD_OPERAND(in) OperandOf(*state_, in, in.tensor_, in.value_)

Batch::Value Batch::binary(BinaryOp op, Input a, Input b) {
  v1::Op m = internal::BinaryOpMsg(op, TENSORD_OPERAND(a), TENSORD_OPERAND(b));
  return Record(&m);
}

Batch::Value Batch::binary(BinaryOp op, Input a, Scalar b) {
  v1::Op m = internal::BinaryOpMsg(op, TENSORD_OPERAND(a), b);
  return Record(&m);
}

Batch::Value Batch::unary(UnaryOp op, Input x,
                          std::initializer_list<double> args) {
  v1::Op m = internal::UnaryOpMsg(op, TENSORD_OPERAND(x), args);
  return Record(&m);
}

Batch::Value Batch::unary(UnaryOp op, Input x) {
  v1::Op m = internal::UnaryOpMsg(op, TENSORD_OPERAND(x));
  return Record(&m);
}

Batch::Value Batch::gelu(Input x, std::string_view approximate) {
  return unary(internal::GeluOp(approximate), x);
}

Batch::Value Batch::reduce(ReduceOp op, Input x, std::optional<int64_t> dim,
                           bool keepdim) {
  v1::Op m = internal::ReduceOpMsg(op, TENSORD_OPERAND(x), dim, keepdim);
  return Record(&m);
}

Batch::Value Batch::matmul(Input a, Input b) {
  v1::Op m = internal::MatMulOpMsg(TENSORD_OPERAND(a), TENSORD_OPERAND(b));
  return Record(&m);
}

Batch::Value Batch::reduce(ReduceOp op, Input x, std::span<const int64_t> dims,
                           bool keepdim) {
  v1::Op m = internal::ReduceOpMsg(op, TENSORD_OPERAND(x), dims, keepdim);
  return Record(&m);
}

Batch::Value Batch::where(Input condition, Input input, Input other) {
  v1::Op m =
      internal::WhereOpMsg(TENSORD_OPERAND(condition), TENSORD_OPERAND(input),
                           TENSORD_OPERAND(other));
  return Record(&m);
}
Batch::Value Batch::where(Input condition, Input input, Scalar other) {
  v1::Op m = internal::WhereOpMsg(TENSORD_OPERAND(condition),
                                  TENSORD_OPERAND(input), other);
  return Record(&m);
}
Batch::Value Batch::where(Input condition, Scalar input, Input other) {
  v1::Op m = internal::WhereOpMsg(TENSORD_OPERAND(condition), input,
                                  TENSORD_OPERAND(other));
  return Record(&m);
}
Batch::Value Batch::where(Input condition, Scalar input, Scalar other) {
  v1::Op m = internal::WhereOpMsg(TENSORD_OPERAND(condition), input, other);
  return Record(&m);
}

Batch::Value Batch::softmax(Input x, int64_t dim) {
  v1::Op m = internal::SoftmaxOpMsg(TENSORD_OPERAND(x), dim, false);
  return Record(&m);
}

Batch::Value Batch::log_softmax(Input x, int64_t dim) {
  v1::Op m = internal::SoftmaxOpMsg(TENSORD_OPERAND(x), dim, true);
  return Record(&m);
}

Batch::Value Batch::clamp(Input x, std::optional<Scalar> min,
                          std::optional<Scalar> max) {
  v1::Op m = internal::ClampOpMsg(TENSORD_OPERAND(x), min, max);
  return Record(&m);
}

Batch::Value Batch::clamp(Input x, std::optional<Input> min,
                          std::optional<Input> max) {
  std::optional<v1::Operand> lo, hi;
  if (min.has_value()) lo = TENSORD_OPERAND((*min));
  if (max.has_value()) hi = TENSORD_OPERAND((*max));
  v1::Op m =
      internal::ClampOpMsg(TENSORD_OPERAND(x), std::move(lo), std::move(hi));
  return Record(&m);
}

Batch::Value Batch::linear(Input x, Input weight, std::optional<Input> bias) {
  std::optional<v1::Operand> b;
  if (bias.has_value()) b = TENSORD_OPERAND((*bias));
  v1::Op m = internal::LinearOpMsg(TENSORD_OPERAND(x), TENSORD_OPERAND(weight),
                                   std::move(b));
  return Record(&m);
}

Batch::Value Batch::conv2d(Input x, Input weight, std::optional<Input> bias,
                           const Conv2dOptions& options) {
  std::optional<v1::Operand> b;
  if (bias.has_value()) b = TENSORD_OPERAND((*bias));
  v1::Op m = internal::Conv2dOpMsg(TENSORD_OPERAND(x), TENSORD_OPERAND(weight),
                                   std::move(b), options);
  return Record(&m);
}

Batch::Value Batch::max_pool2d(Input x, const std::vector<int64_t>& kernel_size,
                               const Pool2dOptions& options) {
  v1::Op m = internal::Pool2dOpMsg(v1::MAX_POOL, TENSORD_OPERAND(x),
                                   kernel_size, options);
  return Record(&m);
}

Batch::Value Batch::avg_pool2d(Input x, const std::vector<int64_t>& kernel_size,
                               const Pool2dOptions& options) {
  v1::Op m = internal::Pool2dOpMsg(v1::AVG_POOL, TENSORD_OPERAND(x),
                                   kernel_size, options);
  return Record(&m);
}

Batch::Value Batch::adaptive_avg_pool2d(
    Input x, const std::vector<int64_t>& output_size) {
  v1::Op m = internal::AdaptiveAvgPool2dOpMsg(TENSORD_OPERAND(x), output_size);
  return Record(&m);
}

Batch::Value Batch::requires_grad_(Input x, bool requires_grad) {
  v1::Op m;
  *m.mutable_requires_grad()->mutable_x() = TENSORD_OPERAND(x);
  m.mutable_requires_grad()->set_requires_grad(requires_grad);
  return Record(&m);
}

Batch::Value Batch::backward(Input root, std::optional<Input> gradient,
                             bool retain_graph) {
  v1::Op m;
  v1::BackwardArgs* args = m.mutable_backward();
  *args->mutable_root() = TENSORD_OPERAND(root);
  if (gradient.has_value()) {
    *args->mutable_gradient() = TENSORD_OPERAND((*gradient));
  }
  args->set_retain_graph(retain_graph);
  return Record(&m);
}

Batch::Value Batch::grad(Input x) {
  v1::Op m;
  *m.mutable_grad()->mutable_x() = TENSORD_OPERAND(x);
  return Record(&m);
}

Batch::Value Batch::detach(Input x) {
  v1::Op m;
  *m.mutable_detach()->mutable_x() = TENSORD_OPERAND(x);
  return Record(&m);
}

Batch::Value Batch::zero_grad(std::span<const Input> tensors) {
  v1::Op m;
  for (const Input& t : tensors) {
    *m.mutable_zero_grad()->add_tensors() = TENSORD_OPERAND(t);
  }
  return Record(&m);
}

Batch::Value Batch::dropout(Input x, double p, bool training,
                            std::optional<uint64_t> seed) {
  v1::Op m = internal::DropoutOpMsg(TENSORD_OPERAND(x), p, training, seed);
  return Record(&m);
}

Batch::Value Batch::nll_loss(Input input, Input target, Reduction reduction,
                             int64_t ignore_index) {
  v1::Op m =
      internal::LossOpMsg(v1::NLL_LOSS, TENSORD_OPERAND(input),
                          TENSORD_OPERAND(target), reduction, ignore_index);
  return Record(&m);
}

Batch::Value Batch::cross_entropy(Input input, Input target,
                                  Reduction reduction, int64_t ignore_index) {
  v1::Op m =
      internal::LossOpMsg(v1::CROSS_ENTROPY, TENSORD_OPERAND(input),
                          TENSORD_OPERAND(target), reduction, ignore_index);
  return Record(&m);
}

Batch::Value Batch::mse_loss(Input input, Input target, Reduction reduction) {
  v1::Op m = internal::LossOpMsg(v1::MSE_LOSS, TENSORD_OPERAND(input),
                                 TENSORD_OPERAND(target), reduction, -100);
  return Record(&m);
}

Batch::Value Batch::transpose(Input x, int64_t dim0, int64_t dim1) {
  v1::Op m = internal::TransposeOpMsg(TENSORD_OPERAND(x), dim0, dim1);
  return Record(&m);
}

Batch::Value Batch::reshape(Input x, const std::vector<int64_t>& shape) {
  v1::Op m = internal::ReshapeOpMsg(TENSORD_OPERAND(x), shape);
  return Record(&m);
}

Batch::Value Batch::narrow(Input x, int64_t dim, int64_t start,
                           int64_t length) {
  v1::Op m = internal::NarrowOpMsg(TENSORD_OPERAND(x), dim, start, length);
  return Record(&m);
}

Batch::Value Batch::cat(const std::vector<Input>& xs, int64_t dim) {
  std::vector<v1::Operand> operands;
  for (const Input& x : xs) operands.push_back(TENSORD_OPERAND(x));
  v1::Op m = internal::CatOpMsg(std::move(operands), dim);
  return Record(&m);
}

Batch::Value Batch::to(Input x, DType dtype) {
  v1::Op m = internal::CastOpMsg(TENSORD_OPERAND(x), dtype);
  return Record(&m);
}

Batch::Value Batch::sub_(Input target, Input other) {
  const v1::Operand o = TENSORD_OPERAND(other);
  v1::Op m =
      internal::InPlaceOpMsg(v1::SUB_, TENSORD_OPERAND(target), &o, nullptr);
  return Record(&m);
}

Batch::Value Batch::add_(Input target, Input other) {
  const v1::Operand o = TENSORD_OPERAND(other);
  v1::Op m =
      internal::InPlaceOpMsg(v1::ADD_, TENSORD_OPERAND(target), &o, nullptr);
  return Record(&m);
}

Batch::Value Batch::mul_(Input target, Scalar other) {
  v1::Op m = internal::InPlaceOpMsg(v1::MUL_, TENSORD_OPERAND(target), nullptr,
                                    &other);
  return Record(&m);
}

Batch::Value Batch::axpy_(Input target, Scalar alpha, Input x) {
  const v1::Operand o = TENSORD_OPERAND(x);
  v1::Op m = internal::InPlaceOpMsg(v1::AXPY_, TENSORD_OPERAND(target), &o,
                                    nullptr, &alpha);
  return Record(&m);
}

// The functions and Batch methods of the op table's rows with a `func`.
#define TENSORD_FUNCTION_DEFS
#include "tensord/op_methods.inc"  // generated (core/base/gen_op_table.py)

#undef TENSORD_OPERAND

void Batch::keep(Value v) {
  if (v.owner_ != state_.get()) {
    throw Error(StatusCode::INVALID_ARGUMENT,
                "keep(): the value was recorded by another batch");
  }
  state_->request.add_keep(v.index());
}

BatchResults Batch::run() {
  if (state_->ran) {
    throw Error(StatusCode::FAILED_PRECONDITION, "a Batch runs only once");
  }
  state_->ran = true;
  BatchResults results;
  // On a pipelined client, a list it planned goes on the stream without
  // waiting: its kept results are new tensors at once.
  std::vector<std::shared_ptr<const internal::TensorState>> planned;
  const std::vector<uint32_t> keep(state_->request.keep().begin(),
                                   state_->request.keep().end());
  if (state_->session->ExecuteOnStreamPlanned(&state_->request, &planned)) {
    for (size_t i = 0; i < keep.size(); ++i) {
      results.tensors_.emplace(
          keep[i], internal::TensorAccess::Make(std::move(planned[i])));
    }
    state_->inputs.clear();
    return results;
  }
  // Else one command on the stream, waited for (no drain first), or the
  // unary Execute.
  std::optional<v1::ExecuteResponse> streamed =
      state_->session->ExecuteOnStream(state_->request);
  const v1::ExecuteResponse response =
      streamed.has_value()
          ? *std::move(streamed)
          : state_->session->Call(&v1::TensorService::Stub::Execute,
                                  state_->request);
  for (int i = 0; i < response.kept_size(); ++i) {
    const uint32_t index = state_->request.keep(i);
    if (results.tensors_.count(index) > 0) continue;
    const v1::TensorInfo& info = response.kept(i);
    // An in-place op on an input tensor hands back that tensor's handle,
    // which its Tensor already owns: share it rather than adopt it twice.
    std::optional<Tensor> existing;
    for (const Tensor& t : state_->inputs) {
      if (t.handle() == info.handle()) existing = t;
    }
    results.tensors_.emplace(index, existing.has_value()
                                        ? *existing
                                        : internal::TensorAccess::Make(
                                              state_->session->Adopt(info)));
    if (!info.value().empty()) results.values_.emplace(index, info.value());
  }
  state_->inputs.clear();
  return results;
}

const Tensor& BatchResults::operator[](Batch::Value v) const {
  auto it = tensors_.find(v.index());
  if (it == tensors_.end()) {
    throw Error(StatusCode::INVALID_ARGUMENT,
                "op #" + std::to_string(v.index()) +
                    " of the batch was not kept (call keep() before run())");
  }
  return it->second;
}

}  // namespace tensord::client
