// The input gradients of each recorded op (core/autograd/autograd.h): PyTorch's
// derivative formulas (tools/autograd/derivatives.yaml), written with the
// forward ops' own kernels through GradMath, so a backward runs on every
// device its forward runs on. Gradients come out in the op's computation
// dtype; the engine casts each to its input's dtype. conv2d and the pooling
// ops are window_ops.cc's, the losses loss_ops.cc's.
#include <numbers>

#include "core/autograd/autograd.h"
#include "core/autograd/engine.h"
#include "core/autograd/grad_math.h"
#include "core/base/op_table.h"
#include "core/executor/executor.h"
#include "core/planner/op_plan.h"

namespace tensord::core {
namespace {

using Kind = OpSpec::Kind;
using TensorPtr = std::shared_ptr<const StoredTensor>;
using Bound = OpSpec::Bound;

bool Needs(const GradNode& node, size_t i) {
  return i < node.next.size() && node.next[i].active();
}

double NumberOf(const Scalar& s) {
  return s.is_integral ? static_cast<double>(s.i) : s.f;
}

int64_t Wrap(int64_t dim, int rank) {
  return dim < 0 ? dim + std::max(rank, 1) : dim;
}

absl::Status Unimplemented(const GradNode& node, std::string_view what) {
  return absl::UnimplementedError(
      absl::StrCat("the backward of ", OpName(node.op), " ", ToAbsl(what),
                   " is not implemented in tensord yet (", node.Name(), ")"));
}

}  // namespace

absl::Status Executor::GradMath::BinaryGrads(const GradNode& node,
                                             const TensorPtr& g, Grads& out) {
  const OpSpec& op = node.op;
  const TensorPtr& a = node.inputs[0].data;
  const TensorPtr b = node.inputs.size() > 1 ? node.inputs[1].data : nullptr;
  const double s = op.scalar.has_value() ? NumberOf(*op.scalar) : 0;
  const bool first = op.scalar_first;
  const bool need_a = Needs(node, 0), need_b = b != nullptr && Needs(node, 1);
  // Gradients of both operands before summing each down to its shape.
  TensorPtr ga, gb;
  switch (op.binary) {
    case BinaryOp::kAdd:
      ga = g;
      gb = g;
      break;
    case BinaryOp::kSub:
      if (b == nullptr && first) {  // s - a
        ASSIGN_OR_RETURN(ga, Num(BinaryOp::kMul, g, -1));
      } else {
        ga = g;
        if (need_b) {
          ASSIGN_OR_RETURN(gb, Num(BinaryOp::kMul, g, -1));
        }
      }
      break;
    case BinaryOp::kMul:
      if (b == nullptr) {
        ASSIGN_OR_RETURN(ga, Num(BinaryOp::kMul, g, s));
      } else {
        if (need_a) {
          ASSIGN_OR_RETURN(ga, Bin(BinaryOp::kMul, g, b));
        }
        if (need_b) {
          ASSIGN_OR_RETURN(gb, Bin(BinaryOp::kMul, g, a));
        }
      }
      break;
    case BinaryOp::kDiv:
      if (b == nullptr && !first) {  // a / s
        ASSIGN_OR_RETURN(ga, Num(BinaryOp::kDiv, g, s));
      } else if (b == nullptr) {  // s / a: -g s / a^2
        ASSIGN_OR_RETURN(TensorPtr a2, Bin(BinaryOp::kMul, a, a));
        ASSIGN_OR_RETURN(TensorPtr q, Bin(BinaryOp::kDiv, g, a2));
        ASSIGN_OR_RETURN(ga, Num(BinaryOp::kMul, q, -s));
      } else {
        if (need_a) {
          ASSIGN_OR_RETURN(ga, Bin(BinaryOp::kDiv, g, b));
        }
        if (need_b) {  // -g a / b^2
          ASSIGN_OR_RETURN(TensorPtr b2, Bin(BinaryOp::kMul, b, b));
          ASSIGN_OR_RETURN(TensorPtr ga_b, Bin(BinaryOp::kMul, g, a));
          ASSIGN_OR_RETURN(TensorPtr q, Bin(BinaryOp::kDiv, ga_b, b2));
          ASSIGN_OR_RETURN(gb, Num(BinaryOp::kMul, q, -1));
        }
      }
      break;
    case BinaryOp::kMaximum:
    case BinaryOp::kMinimum: {
      // The winner takes the gradient; a tie splits it in halves.
      const BinaryOp wins =
          op.binary == BinaryOp::kMaximum ? BinaryOp::kGt : BinaryOp::kLt;
      TensorPtr win, tie;
      if (b == nullptr) {
        ASSIGN_OR_RETURN(win, Num(wins, a, s));
        ASSIGN_OR_RETURN(tie, Num(BinaryOp::kEq, a, s));
      } else {
        ASSIGN_OR_RETURN(win, Bin(wins, a, b));
        ASSIGN_OR_RETURN(tie, Bin(BinaryOp::kEq, a, b));
      }
      ASSIGN_OR_RETURN(win, Mask(win, g->dtype));
      ASSIGN_OR_RETURN(tie, Mask(tie, g->dtype));
      ASSIGN_OR_RETURN(TensorPtr half, Num(BinaryOp::kMul, tie, 0.5));
      ASSIGN_OR_RETURN(TensorPtr share, Bin(BinaryOp::kAdd, win, half));
      ASSIGN_OR_RETURN(ga, Bin(BinaryOp::kMul, g, share));
      if (need_b) {
        ASSIGN_OR_RETURN(gb, Bin(BinaryOp::kSub, g, ga));
      }
      break;
    }
    case BinaryOp::kPow: {
      const TensorPtr& y = node.output.data;
      if (b == nullptr && !first) {  // a ** s: g s a^(s - 1)
        if (s == 0) {
          ASSIGN_OR_RETURN(ga, Num(BinaryOp::kMul, g, 0));
        } else {
          ASSIGN_OR_RETURN(TensorPtr p, Num(BinaryOp::kPow, a, s - 1));
          ASSIGN_OR_RETURN(TensorPtr sp, Num(BinaryOp::kMul, p, s));
          ASSIGN_OR_RETURN(ga, Bin(BinaryOp::kMul, g, sp));
        }
      } else if (b == nullptr) {  // s ** a: g y log(s)
        ASSIGN_OR_RETURN(TensorPtr gy, Bin(BinaryOp::kMul, g, y));
        ASSIGN_OR_RETURN(ga, Num(BinaryOp::kMul, gy, std::log(s)));
      } else {
        if (need_a) {  // g b a^(b - 1)
          ASSIGN_OR_RETURN(TensorPtr b1, Num(BinaryOp::kSub, b, 1));
          ASSIGN_OR_RETURN(TensorPtr p, Bin(BinaryOp::kPow, a, b1));
          ASSIGN_OR_RETURN(TensorPtr bp, Bin(BinaryOp::kMul, b, p));
          ASSIGN_OR_RETURN(ga, Bin(BinaryOp::kMul, g, bp));
        }
        if (need_b) {  // g y log(a), 0 where a == 0 (PyTorch's mask)
          ASSIGN_OR_RETURN(TensorPtr log_a, Un(UnaryOp::kLog, a));
          ASSIGN_OR_RETURN(TensorPtr gy, Bin(BinaryOp::kMul, g, y));
          ASSIGN_OR_RETURN(TensorPtr full, Bin(BinaryOp::kMul, gy, log_a));
          ASSIGN_OR_RETURN(TensorPtr zero, Num(BinaryOp::kEq, a, 0));
          ASSIGN_OR_RETURN(
              gb, Keep(rt_.WhereOut(
                      *zero, Bound{Bound::Kind::kScalar, Scalar::Float(0)},
                      nullptr, Bound{Bound::Kind::kTensor, {}}, full.get())));
        }
      }
      break;
    }
    default:
      return Unimplemented(node, "");
  }
  if (need_a && ga != nullptr) {
    ASSIGN_OR_RETURN(out[0], SumTo(ga, a->shape));
  }
  if (need_b && gb != nullptr) {
    ASSIGN_OR_RETURN(out[1], SumTo(gb, b->shape));
  }
  return absl::OkStatus();
}

absl::Status Executor::GradMath::UnaryGrads(const GradNode& node,
                                            const TensorPtr& g, Grads& out) {
  const TensorPtr& x = node.inputs[0].data;
  const TensorPtr& y = node.output.data;
  TensorPtr d;  // dy/dx, or the gradient itself where noted
  switch (node.op.unary) {
    case UnaryOp::kNeg: {
      ASSIGN_OR_RETURN(out[0], Num(BinaryOp::kMul, g, -1));
      return absl::OkStatus();
    }
    case UnaryOp::kAbs: {  // sign(x)
      ASSIGN_OR_RETURN(TensorPtr pos, Num(BinaryOp::kGt, x, 0));
      ASSIGN_OR_RETURN(TensorPtr neg, Num(BinaryOp::kLt, x, 0));
      ASSIGN_OR_RETURN(pos, Mask(pos, g->dtype));
      ASSIGN_OR_RETURN(neg, Mask(neg, g->dtype));
      ASSIGN_OR_RETURN(d, Bin(BinaryOp::kSub, pos, neg));
      break;
    }
    case UnaryOp::kExp:
      d = y;
      break;
    case UnaryOp::kLog: {
      ASSIGN_OR_RETURN(out[0], Bin(BinaryOp::kDiv, g, x));
      return absl::OkStatus();
    }
    case UnaryOp::kSqrt: {  // g / (2 y)
      ASSIGN_OR_RETURN(TensorPtr twice, Num(BinaryOp::kMul, y, 2));
      ASSIGN_OR_RETURN(out[0], Bin(BinaryOp::kDiv, g, twice));
      return absl::OkStatus();
    }
    case UnaryOp::kRelu: {
      ASSIGN_OR_RETURN(TensorPtr pos, Num(BinaryOp::kGt, y, 0));
      ASSIGN_OR_RETURN(d, Mask(pos, g->dtype));
      break;
    }
    case UnaryOp::kSigmoid: {  // y (1 - y)
      ASSIGN_OR_RETURN(TensorPtr rest, Num(BinaryOp::kSub, y, 1, true));
      ASSIGN_OR_RETURN(d, Bin(BinaryOp::kMul, y, rest));
      break;
    }
    case UnaryOp::kTanh: {  // 1 - y^2
      ASSIGN_OR_RETURN(TensorPtr y2, Bin(BinaryOp::kMul, y, y));
      ASSIGN_OR_RETURN(d, Num(BinaryOp::kSub, y2, 1, true));
      break;
    }
    case UnaryOp::kSilu: {  // s (1 + x (1 - s)), s = sigmoid(x)
      ASSIGN_OR_RETURN(TensorPtr s, Un(UnaryOp::kSigmoid, x));
      ASSIGN_OR_RETURN(TensorPtr rest, Num(BinaryOp::kSub, s, 1, true));
      ASSIGN_OR_RETURN(TensorPtr xr, Bin(BinaryOp::kMul, x, rest));
      ASSIGN_OR_RETURN(TensorPtr one_xr, Num(BinaryOp::kAdd, xr, 1));
      ASSIGN_OR_RETURN(d, Bin(BinaryOp::kMul, s, one_xr));
      break;
    }
    case UnaryOp::kGelu: {
      // Phi(x) + x phi(x); Phi(x) = gelu(x) / x (1/2 at 0), phi the normal
      // density.
      ASSIGN_OR_RETURN(TensorPtr gelu, Un(UnaryOp::kGelu, x));
      ASSIGN_OR_RETURN(TensorPtr ratio, Bin(BinaryOp::kDiv, gelu, x));
      ASSIGN_OR_RETURN(TensorPtr zero, Num(BinaryOp::kEq, x, 0));
      ASSIGN_OR_RETURN(
          TensorPtr cdf,
          Keep(rt_.WhereOut(
              *zero, Bound{Bound::Kind::kScalar, Scalar::Float(0.5)}, nullptr,
              Bound{Bound::Kind::kTensor, {}}, ratio.get())));
      ASSIGN_OR_RETURN(TensorPtr x2, Bin(BinaryOp::kMul, x, x));
      ASSIGN_OR_RETURN(TensorPtr e, Num(BinaryOp::kMul, x2, -0.5));
      ASSIGN_OR_RETURN(e, Un(UnaryOp::kExp, e));
      ASSIGN_OR_RETURN(TensorPtr pdf, Num(BinaryOp::kMul, e,
                                          1 / std::sqrt(2 * std::numbers::pi)));
      ASSIGN_OR_RETURN(TensorPtr xpdf, Bin(BinaryOp::kMul, x, pdf));
      ASSIGN_OR_RETURN(d, Bin(BinaryOp::kAdd, cdf, xpdf));
      break;
    }
    case UnaryOp::kGeluTanh: {
      // y = x/2 (1 + t), t = tanh(u), u = k (x + c x^3):
      // dy/dx = (1 + t)/2 + x/2 (1 - t^2) k (1 + 3 c x^2).
      const double k = std::sqrt(2 / std::numbers::pi), c = 0.044715;
      ASSIGN_OR_RETURN(TensorPtr x2, Bin(BinaryOp::kMul, x, x));
      ASSIGN_OR_RETURN(TensorPtr x3, Bin(BinaryOp::kMul, x2, x));
      ASSIGN_OR_RETURN(TensorPtr cx3, Num(BinaryOp::kMul, x3, c));
      ASSIGN_OR_RETURN(TensorPtr u, Bin(BinaryOp::kAdd, x, cx3));
      ASSIGN_OR_RETURN(u, Num(BinaryOp::kMul, u, k));
      ASSIGN_OR_RETURN(TensorPtr t, Un(UnaryOp::kTanh, u));
      ASSIGN_OR_RETURN(TensorPtr left, Num(BinaryOp::kAdd, t, 1));
      ASSIGN_OR_RETURN(left, Num(BinaryOp::kMul, left, 0.5));
      ASSIGN_OR_RETURN(TensorPtr t2, Bin(BinaryOp::kMul, t, t));
      ASSIGN_OR_RETURN(TensorPtr sech2, Num(BinaryOp::kSub, t2, 1, true));
      ASSIGN_OR_RETURN(TensorPtr du, Num(BinaryOp::kMul, x2, 3 * c));
      ASSIGN_OR_RETURN(du, Num(BinaryOp::kAdd, du, 1));
      ASSIGN_OR_RETURN(du, Num(BinaryOp::kMul, du, k * 0.5));
      ASSIGN_OR_RETURN(TensorPtr right, Bin(BinaryOp::kMul, x, sech2));
      ASSIGN_OR_RETURN(right, Bin(BinaryOp::kMul, right, du));
      ASSIGN_OR_RETURN(d, Bin(BinaryOp::kAdd, left, right));
      break;
    }
    case UnaryOp::kLeakyRelu: {  // 1 above 0, negative_slope elsewhere
      const double slope = node.op.args[0];
      ASSIGN_OR_RETURN(TensorPtr pos, Num(BinaryOp::kGt, x, 0));
      ASSIGN_OR_RETURN(pos, Mask(pos, g->dtype));
      ASSIGN_OR_RETURN(d, Num(BinaryOp::kMul, pos, 1 - slope));
      ASSIGN_OR_RETURN(d, Num(BinaryOp::kAdd, d, slope));
      break;
    }
    case UnaryOp::kElu: {  // 1 above 0, alpha exp(x) elsewhere
      const double alpha = node.op.args[0];
      ASSIGN_OR_RETURN(TensorPtr pos, Num(BinaryOp::kGt, x, 0));
      ASSIGN_OR_RETURN(pos, Mask(pos, g->dtype));
      ASSIGN_OR_RETURN(TensorPtr e, Un(UnaryOp::kExp, x));
      ASSIGN_OR_RETURN(e, Num(BinaryOp::kMul, e, alpha));
      ASSIGN_OR_RETURN(TensorPtr neg, Num(BinaryOp::kSub, pos, 1, true));
      ASSIGN_OR_RETURN(e, Bin(BinaryOp::kMul, e, neg));
      ASSIGN_OR_RETURN(d, Bin(BinaryOp::kAdd, pos, e));
      break;
    }
    case UnaryOp::kHardtanh: {  // 1 strictly inside (min_val, max_val)
      ASSIGN_OR_RETURN(TensorPtr above, Num(BinaryOp::kGt, x, node.op.args[0]));
      ASSIGN_OR_RETURN(TensorPtr below, Num(BinaryOp::kLt, x, node.op.args[1]));
      ASSIGN_OR_RETURN(above, Mask(above, g->dtype));
      ASSIGN_OR_RETURN(below, Mask(below, g->dtype));
      ASSIGN_OR_RETURN(d, Bin(BinaryOp::kMul, above, below));
      break;
    }
  }
  ASSIGN_OR_RETURN(out[0], Bin(BinaryOp::kMul, g, d));
  return absl::OkStatus();
}

absl::Status Executor::GradMath::MatMulGrads(const GradNode& node,
                                             const TensorPtr& g, Grads& out) {
  const TensorPtr& a = node.inputs[0].data;
  const TensorPtr& b = node.inputs[1].data;
  // Vectors as matrices: a [k] as [1, k], b [k] as [k, 1]; g with the
  // dims a vector dropped put back.
  const bool a_vec = a->shape.rank() == 1, b_vec = b->shape.rank() == 1;
  TensorPtr a2 = a, b2 = b;
  if (a_vec) {
    ASSIGN_OR_RETURN(a2, Reshape(a, {1, a->shape.dim(0)}));
  }
  if (b_vec) {
    ASSIGN_OR_RETURN(b2, Reshape(b, {b->shape.dim(0), 1}));
  }
  const int trailing = (a_vec ? 0 : 1) + (b_vec ? 0 : 1);
  std::vector<int64_t> dims(g->shape.dims().begin(),
                            g->shape.dims().end() - trailing);
  dims.push_back(a2->shape.dim(a2->shape.rank() - 2));
  dims.push_back(b2->shape.dim(b2->shape.rank() - 1));
  ASSIGN_OR_RETURN(Shape g2_shape, Shape::Make(dims));
  ASSIGN_OR_RETURN(TensorPtr g2, Reshape(g, g2_shape));
  if (Needs(node, 0)) {
    ASSIGN_OR_RETURN(TensorPtr bt, TransposeLast(b2));
    ASSIGN_OR_RETURN(TensorPtr ga, MatMul(g2, bt));
    ASSIGN_OR_RETURN(ga, SumTo(ga, a2->shape));
    ASSIGN_OR_RETURN(out[0], Reshape(ga, a->shape));
  }
  if (Needs(node, 1)) {
    ASSIGN_OR_RETURN(TensorPtr at, TransposeLast(a2));
    ASSIGN_OR_RETURN(TensorPtr gb, MatMul(at, g2));
    ASSIGN_OR_RETURN(gb, SumTo(gb, b2->shape));
    ASSIGN_OR_RETURN(out[1], Reshape(gb, b->shape));
  }
  return absl::OkStatus();
}

absl::Status Executor::GradMath::LinearGrads(const GradNode& node,
                                             const TensorPtr& g, Grads& out) {
  // y = x w^T + bias; x [..., in], w [out, in], bias [out].
  const TensorPtr& x = node.inputs[0].data;
  const TensorPtr& w = node.inputs[1].data;
  if (Needs(node, 0)) {
    ASSIGN_OR_RETURN(out[0], MatMul(g, w));
  }
  if (Needs(node, 1)) {
    const int64_t in = w->shape.dim(1), outs = w->shape.dim(0);
    const int64_t rows = in == 0 ? 0 : x->shape.NumElements() / in;
    ASSIGN_OR_RETURN(TensorPtr x2, Reshape(x, {rows, in}));
    ASSIGN_OR_RETURN(TensorPtr g2, Reshape(g, {rows, outs}));
    ASSIGN_OR_RETURN(TensorPtr gt, TransposeLast(g2));
    ASSIGN_OR_RETURN(out[1], MatMul(gt, x2));
  }
  if (node.inputs.size() > 2 && Needs(node, 2)) {
    ASSIGN_OR_RETURN(out[2], SumTo(g, node.inputs[2].data->shape));
  }
  return absl::OkStatus();
}

absl::Status Executor::GradMath::ReduceGrads(const GradNode& node,
                                             const TensorPtr& g, Grads& out) {
  const OpSpec& op = node.op;
  const TensorPtr& x = node.inputs[0].data;
  const int rank = x->shape.rank();
  std::vector<int64_t> dims = op.reduce_dims;
  if (dims.empty() && op.dim.has_value()) dims.push_back(*op.dim);
  if (dims.empty()) {
    for (int i = 0; i < rank; ++i) dims.push_back(i);
  }
  // The result's shape with the reduced dims kept (as 1).
  std::vector<int64_t> kept = x->shape.DimsVector();
  int64_t count = 1;
  for (int64_t& d : dims) {
    d = Wrap(d, rank);
    if (rank > 0) {
      count *= kept[d];
      kept[d] = 1;
    }
  }
  ASSIGN_OR_RETURN(Shape kept_shape, Shape::Make(kept));
  ASSIGN_OR_RETURN(TensorPtr gk, Reshape(g, kept_shape));
  switch (op.reduce) {
    case ReduceOp::kSum: {
      ASSIGN_OR_RETURN(out[0], Expand(gk, x->shape));
      return absl::OkStatus();
    }
    case ReduceOp::kMean: {
      ASSIGN_OR_RETURN(TensorPtr share,
                       Num(BinaryOp::kDiv, gk, static_cast<double>(count)));
      ASSIGN_OR_RETURN(out[0], Expand(share, x->shape));
      return absl::OkStatus();
    }
    case ReduceOp::kMax:
    case ReduceOp::kMin: {  // shared evenly among the elements that tie
      ASSIGN_OR_RETURN(TensorPtr yk, Reshape(node.output.data, kept_shape));
      ASSIGN_OR_RETURN(TensorPtr hit, Bin(BinaryOp::kEq, x, yk));
      ASSIGN_OR_RETURN(hit, Mask(hit, g->dtype));
      ASSIGN_OR_RETURN(TensorPtr ties, Sum(hit, dims, true));
      ASSIGN_OR_RETURN(TensorPtr share, Bin(BinaryOp::kDiv, gk, ties));
      ASSIGN_OR_RETURN(out[0], Bin(BinaryOp::kMul, hit, share));
      return absl::OkStatus();
    }
    case ReduceOp::kNorm: {  // x g / y, 0 where y == 0
      ASSIGN_OR_RETURN(TensorPtr yk, Reshape(node.output.data, kept_shape));
      ASSIGN_OR_RETURN(TensorPtr share, Bin(BinaryOp::kDiv, gk, yk));
      ASSIGN_OR_RETURN(TensorPtr full, Bin(BinaryOp::kMul, x, share));
      ASSIGN_OR_RETURN(TensorPtr zero, Num(BinaryOp::kEq, yk, 0));
      ASSIGN_OR_RETURN(
          out[0], Keep(rt_.WhereOut(
                      *zero, Bound{Bound::Kind::kScalar, Scalar::Float(0)},
                      nullptr, Bound{Bound::Kind::kTensor, {}}, full.get())));
      return absl::OkStatus();
    }
    case ReduceOp::kArgmax:
      break;
  }
  return Unimplemented(node, "");
}

absl::Status Executor::GradMath::SoftmaxGrads(const GradNode& node,
                                              const TensorPtr& g, Grads& out) {
  const TensorPtr& y = node.output.data;
  const int64_t dim = Wrap(node.op.dim.value_or(-1), y->shape.rank());
  const std::span<const int64_t> dims(&dim, y->shape.rank() > 0 ? 1 : 0);
  if (node.op.log) {  // g - exp(y) sum(g)
    ASSIGN_OR_RETURN(TensorPtr total, Sum(g, dims, true));
    ASSIGN_OR_RETURN(TensorPtr p, Un(UnaryOp::kExp, y));
    ASSIGN_OR_RETURN(TensorPtr pt, Bin(BinaryOp::kMul, p, total));
    ASSIGN_OR_RETURN(out[0], Bin(BinaryOp::kSub, g, pt));
  } else {  // y (g - sum(g y))
    ASSIGN_OR_RETURN(TensorPtr gy, Bin(BinaryOp::kMul, g, y));
    ASSIGN_OR_RETURN(TensorPtr total, Sum(gy, dims, true));
    ASSIGN_OR_RETURN(TensorPtr diff, Bin(BinaryOp::kSub, g, total));
    ASSIGN_OR_RETURN(out[0], Bin(BinaryOp::kMul, y, diff));
  }
  return absl::OkStatus();
}

absl::Status Executor::GradMath::PermuteGrads(const GradNode& node,
                                              const TensorPtr& g, Grads& out) {
  const int rank = node.inputs[0].data->shape.rank();
  std::vector<int64_t> inverse(rank);  // the inverse permutation
  for (int i = 0; i < rank; ++i) inverse[Wrap(node.op.dims[i], rank)] = i;
  ASSIGN_OR_RETURN(out[0], Permute(g, inverse));
  return absl::OkStatus();
}

absl::Status Executor::GradMath::TransposeGrads(const GradNode& node,
                                                const TensorPtr& g,
                                                Grads& out) {
  // A transpose is its own inverse.
  ASSIGN_OR_RETURN(const std::vector<int64_t> perm,
                   TransposePerm(node.op, node.inputs[0].data->shape.rank()));
  ASSIGN_OR_RETURN(out[0], Permute(g, perm));
  return absl::OkStatus();
}

absl::Status Executor::GradMath::ReshapeGrads(const GradNode& node,
                                              const TensorPtr& g, Grads& out) {
  ASSIGN_OR_RETURN(out[0], Reshape(g, node.inputs[0].data->shape));
  return absl::OkStatus();
}

absl::Status Executor::GradMath::CastGrads(const GradNode&, const TensorPtr& g,
                                           Grads& out) {
  out[0] = g;  // the engine casts it to the input's dtype
  return absl::OkStatus();
}

absl::Status Executor::GradMath::SliceGrads(const GradNode& node,
                                            const TensorPtr& g, Grads& out) {
  // g written into zeros where the block was.
  const TensorPtr& x = node.inputs[0].data;
  const int rank = x->shape.rank();
  ASSIGN_OR_RETURN(SlicePlan plan, PlanSliceOp(node.op, x->shape));
  ASSIGN_OR_RETURN(TensorPtr gx, Zeros(x->shape, g->dtype));
  if (x->shape.NumElements() > 0 && plan.length > 0) {
    const int64_t es = static_cast<int64_t>(DTypeSize(g->dtype));
    const int64_t inner = x->shape.NumElements(plan.axis + 1, rank) * es;
    BlockCopy copy;
    copy.rows = x->shape.NumElements(0, plan.axis);
    copy.row_bytes = plan.length * inner;
    copy.src_stride = copy.row_bytes;
    copy.dst_offset = plan.start * inner;
    copy.dst_stride = x->shape.dim(plan.axis) * inner;
    RETURN_IF_ERROR(device_.Launch({copy, {RefOf(*g)}, RefOf(*gx)}));
  }
  out[0] = std::move(gx);
  return absl::OkStatus();
}

absl::Status Executor::GradMath::CatGrads(const GradNode& node,
                                          const TensorPtr& g, Grads& out) {
  // Each input's block of g.
  const int grank = g->shape.rank();
  const int axis = static_cast<int>(Wrap(node.op.dim.value_or(0), grank));
  int64_t offset = 0;
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    const Shape& shape = node.inputs[i].data->shape;
    if (shape.rank() != grank) continue;  // a legacy empty [0]
    const int64_t size = shape.dim(axis);
    if (Needs(node, i)) {
      ASSIGN_OR_RETURN(
          out[i], Keep(rt_.SliceOut(*g, SlicePlan{axis, offset, size, shape})));
    }
    offset += size;
  }
  return absl::OkStatus();
}

absl::Status Executor::GradMath::ClampGrads(const GradNode& node,
                                            const TensorPtr& g, Grads& out) {
  // clamp is minimum(maximum(x, min), max): x's gradient passes where
  // min <= x and the raised value <= max; min takes it where x < min (and
  // the raised value <= max), max where the raised value > max.
  const OpSpec& op = node.op;
  const TensorPtr& x = node.inputs[0].data;
  size_t next = 1;
  const bool min_tensor = op.clamp_min.kind == Bound::Kind::kTensor;
  const bool max_tensor = op.clamp_max.kind == Bound::Kind::kTensor;
  const size_t min_index = min_tensor ? next++ : 0;
  const size_t max_index = max_tensor ? next++ : 0;
  // `a` (cmp) the bound, as 0/1 in g's dtype.
  auto compare = [&](BinaryOp cmp, const TensorPtr& a, const Bound& bound,
                     size_t index) -> absl::StatusOr<TensorPtr> {
    TensorPtr hit;
    if (bound.kind == Bound::Kind::kScalar) {
      ASSIGN_OR_RETURN(hit, Num(cmp, a, NumberOf(bound.scalar)));
    } else {
      ASSIGN_OR_RETURN(hit, Bin(cmp, a, node.inputs[index].data));
    }
    return Mask(hit, g->dtype);
  };
  TensorPtr gx = g, g_min, g_max, raised = x;
  if (op.clamp_min.kind != Bound::Kind::kNone) {
    ASSIGN_OR_RETURN(TensorPtr keep,
                     compare(BinaryOp::kGe, x, op.clamp_min, min_index));
    ASSIGN_OR_RETURN(gx, Bin(BinaryOp::kMul, gx, keep));
    if (min_tensor) {
      ASSIGN_OR_RETURN(TensorPtr below,
                       compare(BinaryOp::kLt, x, op.clamp_min, min_index));
      ASSIGN_OR_RETURN(g_min, Bin(BinaryOp::kMul, g, below));
      if (op.clamp_max.kind != Bound::Kind::kNone) {
        ASSIGN_OR_RETURN(raised, Bin(BinaryOp::kMaximum, x,
                                     node.inputs[min_index].data));
      }
    } else if (op.clamp_max.kind != Bound::Kind::kNone) {
      ASSIGN_OR_RETURN(raised, Num(BinaryOp::kMaximum, x,
                                   NumberOf(op.clamp_min.scalar)));
    }
  }
  if (op.clamp_max.kind != Bound::Kind::kNone) {
    ASSIGN_OR_RETURN(TensorPtr keep,
                     compare(BinaryOp::kLe, raised, op.clamp_max, max_index));
    ASSIGN_OR_RETURN(gx, Bin(BinaryOp::kMul, gx, keep));
    if (g_min != nullptr) {
      ASSIGN_OR_RETURN(g_min, Bin(BinaryOp::kMul, g_min, keep));
    }
    if (max_tensor) {
      ASSIGN_OR_RETURN(TensorPtr above, compare(BinaryOp::kGt, raised,
                                                op.clamp_max, max_index));
      ASSIGN_OR_RETURN(g_max, Bin(BinaryOp::kMul, g, above));
    }
  }
  if (Needs(node, 0)) {
    ASSIGN_OR_RETURN(out[0], SumTo(gx, x->shape));
  }
  if (min_tensor && Needs(node, min_index)) {
    ASSIGN_OR_RETURN(out[min_index],
                     SumTo(g_min, node.inputs[min_index].data->shape));
  }
  if (max_tensor && Needs(node, max_index)) {
    ASSIGN_OR_RETURN(out[max_index],
                     SumTo(g_max, node.inputs[max_index].data->shape));
  }
  return absl::OkStatus();
}

absl::Status Executor::GradMath::WhereGrads(const GradNode& node,
                                            const TensorPtr& g, Grads& out) {
  const OpSpec& op = node.op;
  const StoredTensor& cond = *node.inputs[0].data;
  const Bound zero{Bound::Kind::kScalar, Scalar::Float(0)};
  const Bound tensor{Bound::Kind::kTensor, {}};
  size_t next = 1;
  for (const Bound* arg : {&op.where_input, &op.where_other}) {
    if (arg->kind != Bound::Kind::kTensor) continue;
    const size_t i = next++;
    if (!Needs(node, i)) continue;
    const bool taken_where_true = arg == &op.where_input;
    ASSIGN_OR_RETURN(
        TensorPtr gi,
        Keep(taken_where_true
                 ? rt_.WhereOut(cond, tensor, g.get(), zero, nullptr)
                 : rt_.WhereOut(cond, zero, nullptr, tensor, g.get())));
    ASSIGN_OR_RETURN(out[i], SumTo(gi, node.inputs[i].data->shape));
  }
  return absl::OkStatus();
}

absl::Status Executor::GradMath::DropoutGrads(const GradNode& node,
                                              const TensorPtr& g, Grads& out) {
  const OpSpec& op = node.op;
  if (node.extra.data != nullptr) {  // the factor each element got
    ASSIGN_OR_RETURN(out[0], Bin(BinaryOp::kMul, g, node.extra.data));
  } else if (op.train && op.dropout_p == 1) {
    ASSIGN_OR_RETURN(out[0], Num(BinaryOp::kMul, g, 0));
  } else {
    out[0] = g;
  }
  return absl::OkStatus();
}

absl::Status Executor::GradMath::Conv2dGrads(const GradNode& node,
                                             const TensorPtr& g, Grads& out) {
  ASSIGN_OR_RETURN(out, rt_.Conv2dGrads(node, g));
  return absl::OkStatus();
}

absl::Status Executor::GradMath::Pool2dGrads(const GradNode& node,
                                             const TensorPtr& g, Grads& out) {
  ASSIGN_OR_RETURN(out, rt_.Pool2dGrads(node, g));
  return absl::OkStatus();
}

absl::Status Executor::GradMath::LossGrads(const GradNode& node,
                                           const TensorPtr& g, Grads& out) {
  ASSIGN_OR_RETURN(out, rt_.LossGrads(node, g));
  return absl::OkStatus();
}

absl::Status Executor::GradMath::MoveToGrads(const GradNode& node,
                                             const TensorPtr& g, Grads& out) {
  const StoredTensor& x = *node.inputs[0].data;
  DeviceSlot& slot = rt_.SlotOf(x.device);
  ASSIGN_OR_RETURN(Output back, rt_.AllocateOutput(slot, g->dtype, x.shape));
  RETURN_IF_ERROR(x.device->CopyFromDevice(*g->device, *g->buffer, *back.buffer,
                                           back.nbytes));
  out[0] = rt_.Stored(slot, std::move(back));
  return absl::OkStatus();
}

Executor::GradMath::Formula Executor::GradMath::FormulaOf(size_t row) {
#include "core/op_backward.inc"  // generated: kBackwardOf, one per row
  static_assert(std::size(kBackwardOf) == kOpRowCount);
  return kBackwardOf[row];
}

absl::StatusOr<std::vector<Executor::TensorPtr>> AutogradEngine::InputGrads(
    const GradNode& node, const TensorPtr& grad) {
  using GradMath = Executor::GradMath;
  GradMath m(ex_, grad->device);
  GradMath::Grads out(node.inputs.size());
  const GradMath::Formula formula = GradMath::FormulaOf(RowIndexOf(node.op));
  if (formula == nullptr) return Unimplemented(node, "");
  RETURN_IF_ERROR((m.*formula)(node, grad, out));
  out.resize(node.inputs.size());
  return out;
}

}  // namespace tensord::core
