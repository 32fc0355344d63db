// The description of one compute op, as the Runtime runs it alone (Run) or
// in a list (Execute). The wire format (tensord.v1.Op) converts to this in
// the server; core validates everything about it.
// Thread-safety: plain value types.
#ifndef TENSORD_CORE_BASE_OPS_H_
#define TENSORD_CORE_BASE_OPS_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "core/base/device.h"
#include "core/base/dtype.h"

namespace tensord::core {

// A Python number standing in for an operand ("wrapped number" in
// PyTorch): it takes part in type promotion only by category, so an integer
// scalar keeps an int32 tensor int32 and a float scalar turns an integer
// tensor into float32 (the default dtype), never float64.
struct Scalar {
  bool is_integral = false;
  double f = 0;   // when !is_integral
  int64_t i = 0;  // when is_integral
  static Scalar Int(int64_t v) { return Scalar{true, 0, v}; }
  static Scalar Float(double v) { return Scalar{false, v, 0}; }
  std::string ToString() const;  // a float as PythonFloat() spells it
};

// `v` as Python's repr(float) spells it, which torch's messages quote: the
// shortest digits that read back as `v`, "2.0" not "2", "1e-05", "inf".
std::string PythonFloat(double v);

// An op's input: a tensor of the session (by handle), the result of an
// earlier op of the same Execute list or program, or a program's input.
struct Operand {
  bool is_result = false;
  uint64_t handle = 0;     // when neither is_result nor is_input
  uint32_t result_of = 0;  // when is_result: index of the earlier op
  // A program's input #input (core/runtime/program.h; RegisterProgram
  // only).
  bool is_input = false;
  uint32_t input = 0;
  static Operand Handle(uint64_t h) { return Operand{false, h, 0}; }
  static Operand Result(uint32_t i) { return Operand{true, 0, i}; }
  static Operand Input(uint32_t i) { return Operand{false, 0, 0, true, i}; }
};

// In-place updates of inputs[0] ("self"); the result is self (same handle).
// The computed dtype must be castable to self's dtype (PyTorch's rule: no
// floating into integral, nothing but bool into bool), and the broadcast
// shape must be self's shape.
// InPlaceOp (generated from the op table: kAdd, kSub, kMul, kDiv, kAxpy
// for add_, sub_, mul_, div_ and axpy_, self += alpha * other).
std::string_view InPlaceOpName(InPlaceOp op);  // "add_", "sub_", ...
// The elementwise op an in-place op applies to its target: add_ and axpy_
// (which adds alpha * other) add, sub_ subtracts, ...
BinaryOp InPlaceBinaryOp(InPlaceOp op);

// The window arguments of conv2d and the pooling ops as a client gives them
// (torch.nn.functional's): each list empty (the default), one value for
// both dims, or two (height, width). core/planner/window_plan.h checks them.
struct WindowArgs {
  std::vector<int64_t> kernel_size;  // pooling only (required)
  std::vector<int64_t> stride;       // conv2d: 1; pooling: kernel_size
  std::vector<int64_t> padding;      // 0
  std::vector<int64_t> dilation;     // 1 (conv2d and max_pool2d only)
  int64_t groups = 1;                // conv2d
  bool count_include_pad = true;     // avg_pool2d
  std::vector<int64_t> output_size;  // adaptive_avg_pool2d (one or two)
};

// The loss functions (torch.nn.functional's) and how they reduce.
// LossKind (generated from the op table): kNll, nll_loss(log-probabilities,
// class-index targets); kCrossEntropy, nll_loss(log_softmax(logits over the
// class dim), targets); kMse, mse_loss: (input - target)^2.
enum class LossReduction { kMean, kSum, kNone };
std::string_view LossName(LossKind kind);  // "nll_loss", ...

// The normalisations (the op table's Norm rows; NormKind is generated from
// them). OpSpec::inputs holds x, then weight, bias, running_mean and
// running_var, each when present (core/planner/norm_plan.h's NormSlots says
// where); running statistics come as a pair. OpSpec::train selects the
// batch's statistics over the running ones where the kind has both.
struct NormArgs {
  NormKind kind{};
  bool weight = false, bias = false, running_stats = false;
  double eps = 1e-5;
  double momentum = 0.1;                  // the running statistics' update
  std::vector<int64_t> normalized_shape;  // the dims of a last-dims norm
};

// An optimizer's step (torch.optim's update rules, in PyTorch 1.13's order
// of operations), fused over a list of parameters whose state tensors the
// op also updates in place: SGD's momentum buffers, Adam's exp_avg and
// exp_avg_sq. Each parameter's gradient is its grad; a parameter whose
// grad is None is skipped, as PyTorch skips it.
// OptimizerKind (generated from the op table): kSgd, kAdam, kAdamW.
std::string_view OptimizerName(OptimizerKind kind);  // "SGD", "Adam", ...
struct OptimizerArgs {
  OptimizerKind kind = OptimizerKind::kSgd;
  double lr = 1e-3;
  double weight_decay = 0;  // AdamW: decoupled
  bool maximize = false;
  double momentum = 0, dampening = 0;  // SGD
  bool nesterov = false;               // SGD
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // Adam, AdamW
  // This step's number, from 1: Adam's bias correction; SGD's first step
  // sets each momentum buffer to the gradient.
  int64_t step = 1;
};
// How many state tensors each parameter has: 1 for SGD with momentum, 0
// without, 2 for Adam and AdamW.
int OptimizerStateCount(const OptimizerArgs& args);

struct OpSpec {
  // The op's kind (OpSpecKind, generated: the table's `kinds`, each with
  // its doc); with binary, unary, reduce, in_place, log, loss or
  // optimizer.kind it names the op's row (core/base/op_table.h).
  using Kind = OpSpecKind;
  Kind kind = Kind::kBinary;
  BinaryOp binary = BinaryOp::kAdd;
  UnaryOp unary = UnaryOp::kNeg;
  ReduceOp reduce = ReduceOp::kSum;
  InPlaceOp in_place = InPlaceOp::kAdd;
  // Inline for the usual one to three operands (no allocation per op).
  absl::InlinedVector<Operand, 3> inputs;
  // kBinary / kInPlace: the second operand as a number (inputs has one).
  std::optional<Scalar> scalar;
  bool scalar_first = false;      // kBinary: scalar (op) tensor, e.g. 2 - x
  std::optional<int64_t> dim;     // negative counts from the end
  // kReduce: several dims at once when not empty (`dim` then unset).
  std::vector<int64_t> reduce_dims;
  bool log = false;               // kSoftmax: log_softmax
  // kUnary: the op's numeric arguments in its row's `params` order, each
  // defaulted from the row.
  std::array<double, 2> args{};
  int64_t dim1 = 0;               // kTranspose
  bool keepdim = false;           // kReduce
  std::vector<int64_t> dims;      // kPermute order, kReshape shape
  int64_t start = 0;              // kNarrow start, kSelect index
  int64_t length = 0;             // kNarrow
  DType dtype = DType::kFloat32;  // kCast
  Scalar alpha = Scalar::Int(1);  // kAxpy
  // An operand that may be absent, a number, or a tensor (then the next of
  // `inputs`, in the order of the fields below).
  struct Bound {
    enum class Kind { kNone, kScalar, kTensor };
    Kind kind = Kind::kNone;
    Scalar scalar;  // kScalar
  };
  Bound clamp_min, clamp_max;  // kClamp: either may be absent, not both
  // kWhere: inputs[0] is the condition; both are required.
  Bound where_input, where_other;
  WindowArgs window;  // kConv2d, kMaxPool2d, kAvgPool2d
  // kLoss.
  LossKind loss = LossKind::kNll;
  LossReduction reduction = LossReduction::kMean;
  int64_t ignore_index = -100;  // kNll, kCrossEntropy: targets not counted
  // kDropout: each element zeroed with probability dropout_p (the rest
  // scaled by 1 / (1 - p)) when `train`; a copy otherwise.
  double dropout_p = 0.5;
  bool train = true;
  std::optional<uint64_t> seed;  // unset: nondeterministic
  // kRequiresGrad: the flag to set.
  bool requires_grad = true;
  // kBackward: keep the graph's saved tensors for another backward.
  bool retain_graph = false;
  OptimizerArgs optimizer;  // kOptimizerStep
  NormArgs norm;            // kNorm (with `train`)
  // Any op: do not record it for autograd (torch.no_grad()), which is also
  // what lets an in-place op update a leaf that requires grad.
  bool no_grad = false;
};

// A short name for messages: "add", "matmul", "sum", "sub_", "cat", ...
std::string OpName(const OpSpec& op);

}  // namespace tensord::core

#endif  // TENSORD_CORE_BASE_OPS_H_
