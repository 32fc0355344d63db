// Internal: builds tensord.v1.Op messages for the client's Tensor methods
// (one op through Run: every op, operators and in-place ones included, takes
// this one route) and Batch (a list through Execute), so both spell each op
// once. Not part of the public API. Thread-safety: stateless.
#ifndef TENSORD_CLIENT_GRPC_OPS_H_
#define TENSORD_CLIENT_GRPC_OPS_H_

#include <memory>
#include <type_traits>
#include <vector>
#include <span>
#include <string_view>
#include <utility>
#include <variant>

#include "client/grpc_session.h"
#include "tensord/client.h"

namespace tensord::client::internal {

// Private access to Tensor for the library's own files.
struct TensorAccess {
  static const std::shared_ptr<const TensorState>& State(const Tensor& t) {
    return t.state_;
  }
  static Tensor Make(std::shared_ptr<const TensorState> state) {
    return Tensor(std::move(state));
  }
};

// A batch's recorded request and the tensors it reads (kept alive until
// run() so that their handles stay valid), with the optimizer steps it
// recorded (op index, optimizer), which a Program counts at each run.
struct BatchState {
  std::shared_ptr<const Session> session;
  v1::ExecuteRequest request;
  std::vector<Tensor> inputs;
  std::vector<std::pair<uint32_t, optim::Optimizer*>> optimizer_steps;
  bool ran = false;
};

// Calls `f(operand)` for each tensordv1.Operand inside `message` (an Op or
// a part of one, const or not), depth first, until `f` returns true;
// returns whether it did. The one walk over an op's operands, for the
// same-session check and a compiled batch's inputs.
template <typename Message, typename F>
bool AnyOperand(Message& message, const F& f) {
  constexpr bool kConst = std::is_const_v<Message>;
  using Operand = std::conditional_t<kConst, const v1::Operand, v1::Operand>;
  if (auto* operand = dynamic_cast<Operand*>(&message)) return f(*operand);
  const google::protobuf::Reflection* r = message.GetReflection();
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  r->ListFields(message, &fields);
  for (const google::protobuf::FieldDescriptor* field : fields) {
    if (field->cpp_type() !=
        google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
      continue;
    }
    const int n = field->is_repeated() ? r->FieldSize(message, field) : 1;
    for (int i = 0; i < n; ++i) {
      bool found;
      if constexpr (kConst) {
        found = AnyOperand(field->is_repeated()
                               ? r->GetRepeatedMessage(message, field, i)
                               : r->GetMessage(message, field),
                           f);
      } else {
        found = AnyOperand(field->is_repeated()
                               ? *r->MutableRepeatedMessage(&message, field, i)
                               : *r->MutableMessage(&message, field),
                           f);
      }
      if (found) return true;
    }
  }
  return false;
}

v1::Operand HandleOperand(const Tensor& t);
v1::Scalar ToProto(const Scalar& s);

v1::Op BinaryOpMsg(BinaryOp op, v1::Operand a, v1::Operand b);
v1::Op BinaryOpMsg(BinaryOp op, v1::Operand a, const Scalar& b,
                   bool scalar_first = false);
// F.gelu's `approximate` ("none" or "tanh") as the op; INVALID_ARGUMENT
// (thrown) otherwise.
UnaryOp GeluOp(std::string_view approximate);
v1::Op UnaryOpMsg(UnaryOp op, v1::Operand x,
                  std::initializer_list<double> args = {});
v1::Op ReduceOpMsg(ReduceOp op, v1::Operand x, std::optional<int64_t> dim,
                   bool keepdim);
v1::Op ReduceOpMsg(ReduceOp op, v1::Operand x, std::span<const int64_t> dims,
                   bool keepdim);
// torch.where: input and other each a tensor operand or a number.
using OperandOrNumber = std::variant<v1::Operand, Scalar>;
v1::Op WhereOpMsg(v1::Operand cond, OperandOrNumber input,
                  OperandOrNumber other);
v1::Op SoftmaxOpMsg(v1::Operand x, int64_t dim, bool log);
v1::Op ClampOpMsg(v1::Operand x, const std::optional<Scalar>& min,
                  const std::optional<Scalar>& max);
v1::Op ClampOpMsg(v1::Operand x, std::optional<v1::Operand> min,
                  std::optional<v1::Operand> max);
v1::Op MatMulOpMsg(v1::Operand a, v1::Operand b);
v1::Op LinearOpMsg(v1::Operand x, v1::Operand w,
                   std::optional<v1::Operand> bias);
v1::Op Conv2dOpMsg(v1::Operand x, v1::Operand w,
                   std::optional<v1::Operand> bias,
                   const Conv2dOptions& options);
v1::Op Pool2dOpMsg(v1::PoolOp op, v1::Operand x,
                   const std::vector<int64_t>& kernel_size,
                   const Pool2dOptions& options);
v1::Op AdaptiveAvgPool2dOpMsg(v1::Operand x,
                              const std::vector<int64_t>& output_size);
v1::Op DropoutOpMsg(v1::Operand x, double p, bool training,
                    std::optional<uint64_t> seed);
v1::Op LossOpMsg(v1::LossOp op, v1::Operand input, v1::Operand target,
                 Reduction reduction, int64_t ignore_index);
v1::Op TransposeOpMsg(v1::Operand x, int64_t dim0, int64_t dim1);
v1::Op PermuteOpMsg(v1::Operand x, const std::vector<int64_t>& dims);
v1::Op ReshapeOpMsg(v1::Operand x, const std::vector<int64_t>& shape);
v1::Op NarrowOpMsg(v1::Operand x, int64_t dim, int64_t start, int64_t length);
v1::Op SelectOpMsg(v1::Operand x, int64_t dim, int64_t index);
v1::Op CatOpMsg(std::vector<v1::Operand> xs, int64_t dim);
v1::Op CastOpMsg(v1::Operand x, DType dtype);
// `other` or `scalar` (exactly one); alpha for AXPY_.
v1::Op InPlaceOpMsg(v1::InPlaceOp op, v1::Operand target,
                    const v1::Operand* other, const Scalar* scalar,
                    const Scalar* alpha = nullptr);

// Runs `op` in `t`'s session and adopts the result: on the session's command
// stream when it is pipelined (planned here, answered later), else through
// the Run RPC.
Tensor RunOp(const Tensor& t, v1::Op op);
// Runs the in-place `op` on `target` (the one route of add_, sub_, mul_, div_
// and axpy_) through RunOnTarget: `other` or `scalar`, alpha for AXPY_.
// Returns `target`, whose handle and metadata the op keeps.
Tensor& RunInPlace(Tensor& target, v1::InPlaceOp op, const Tensor* other,
                   const Scalar* scalar, const Scalar* alpha = nullptr);
// Runs `op`, whose result is its first operand `target` (an in-place op,
// requires_grad_, zero_grad), on the stream or through Run.
void RunOnTarget(const Tensor& target, v1::Op op);
// `op` as this thread sends it: with no_grad under a NoGradGuard.
void MarkGradMode(v1::Op& op);
// PyTorch's repr suffix for t's autograd state: "grad_fn=<MulBackward0>",
// "requires_grad=True" for a leaf, or "" (asks the server; autograd.cc).
std::string AutogradSuffix(const Tensor& t);
// Zeros of t's shape, dtype and device, in t's session.
Tensor ZerosLike(const Tensor& t);
// A tensor of t's shape, dtype and device in t's session, from `bytes`.
Tensor FromBytesLike(const Tensor& t, std::string_view bytes);

}  // namespace tensord::client::internal

#endif  // TENSORD_CLIENT_GRPC_OPS_H_
