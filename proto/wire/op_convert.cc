#include "proto/wire/op_convert.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/base/absl_compat.h"
#include "core/base/op_table.h"
#include "core/base/status.h"

namespace tensord::wire {

absl::StatusOr<core::DType> FromProto(v1::DType dtype) {
  switch (dtype) {
    case v1::FLOAT32: return core::DType::kFloat32;
    case v1::FLOAT64: return core::DType::kFloat64;
    case v1::INT32: return core::DType::kInt32;
    case v1::INT64: return core::DType::kInt64;
    case v1::BOOL: return core::DType::kBool;
    case v1::FLOAT16: return core::DType::kFloat16;
    case v1::BFLOAT16: return core::DType::kBFloat16;
    case v1::DTYPE_UNSPECIFIED:
      return absl::InvalidArgumentError(
          "dtype is not set; expected one of float32, float64, float16, "
          "bfloat16, int32, int64, bool");
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown dtype ", static_cast<int>(dtype),
          "; expected one of float32, float64, float16, bfloat16, int32, "
          "int64, bool"));
  }
}

v1::DType ToProto(core::DType dtype) {
  switch (dtype) {
    case core::DType::kFloat32: return v1::FLOAT32;
    case core::DType::kFloat64: return v1::FLOAT64;
    case core::DType::kInt32: return v1::INT32;
    case core::DType::kInt64: return v1::INT64;
    case core::DType::kBool: return v1::BOOL;
    case core::DType::kFloat16: return v1::FLOAT16;
    case core::DType::kBFloat16: return v1::BFLOAT16;
  }
  return v1::DTYPE_UNSPECIFIED;
}

namespace {

#include "proto/op_wire.inc"  // generated: kWire_<field>, kWireNames_<field>

// The op table's row that `value` of a wire enum names, among `values`;
// INVALID_ARGUMENT "unknown <what> <value>; expected <names>" when none.
absl::StatusOr<const core::OpRow*> WireRow(std::span<const WireValue> values,
                                           int value, std::string_view what,
                                           std::string_view names) {
  for (const WireValue& v : values) {
    if (v.value == value) return &core::OpRows()[v.row];
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown ", core::ToAbsl(what),
                                                 " ", value, "; expected ",
                                                 core::ToAbsl(names)));
}

// The family enum value (core::UnaryOp, ...) of the row `value` names.
template <typename Enum>
absl::StatusOr<Enum> WireVariant(std::span<const WireValue> values, int value,
                                 std::string_view what,
                                 std::string_view names) {
  ASSIGN_OR_RETURN(const core::OpRow* row, WireRow(values, value, what, names));
  return static_cast<Enum>(row->variant);
}

}  // namespace

absl::StatusOr<core::BinaryOp> FromProto(v1::BinaryOp op) {
  return WireVariant<core::BinaryOp>(kWire_binary, op, "binary op",
                                     kWireNames_binary);
}

core::Scalar FromProto(const v1::Scalar& scalar) {
  if (scalar.value_case() == v1::Scalar::kIntValue) {
    return core::Scalar::Int(scalar.int_value());
  }
  return core::Scalar::Float(scalar.float_value());
}

namespace {

absl::StatusOr<core::UnaryOp> FromProto(v1::UnaryOp op) {
  return WireVariant<core::UnaryOp>(kWire_unary, op, "unary op",
                                    kWireNames_unary);
}

absl::StatusOr<core::ReduceOp> FromProto(v1::ReduceOp op) {
  return WireVariant<core::ReduceOp>(kWire_reduce, op, "reduce op",
                                     kWireNames_reduce);
}

absl::StatusOr<core::InPlaceOp> FromProto(v1::InPlaceOp op) {
  return WireVariant<core::InPlaceOp>(kWire_in_place, op, "in-place op",
                                      kWireNames_in_place);
}

// Appends `operand` to spec.inputs; `name` is the field for messages.
absl::Status AddOperand(const v1::Operand& operand, const char* name,
                        core::OpSpec& spec) {
  switch (operand.source_case()) {
    case v1::Operand::kHandle:
      spec.inputs.push_back(core::Operand::Handle(operand.handle()));
      return absl::OkStatus();
    case v1::Operand::kResultOf:
      spec.inputs.push_back(core::Operand::Result(operand.result_of()));
      return absl::OkStatus();
    case v1::Operand::kInput:
      spec.inputs.push_back(core::Operand::Input(operand.input()));
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "operand `", name, "` is not set: give a handle or a result_of"));
  }
}

// An operand given as a tensor or a number (one of two oneof fields):
// `bound` says which, and a tensor is appended to spec.inputs. Neither is
// INVALID_ARGUMENT "<op>: `<name>` is not set: ..." when `required`.
absl::Status AddBound(bool has_tensor, const v1::Operand& tensor,
                      bool has_number, const v1::Scalar& number, const char* op,
                      const char* name, bool required,
                      core::OpSpec::Bound& bound, core::OpSpec& spec) {
  using Kind = core::OpSpec::Bound::Kind;
  if (has_tensor) {
    bound.kind = Kind::kTensor;
    return AddOperand(tensor, name, spec);
  }
  if (has_number) {
    bound = {Kind::kScalar, wire::FromProto(number)};
  } else if (required) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": `", name, "` is not set: give a tensor or a number"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<core::OpSpec> FromProto(const v1::Op& op) {
  core::OpSpec spec;
  RETURN_IF_ERROR(FromProto(op, spec));
  return spec;
}

absl::Status FromProto(const v1::Op& op, core::OpSpec& spec) {
  using Kind = core::OpSpec::Kind;
  switch (op.kind_case()) {
    case v1::Op::kBinary: {
      const v1::BinaryArgs& a = op.binary();
      spec.kind = Kind::kBinary;
      ASSIGN_OR_RETURN(spec.binary, FromProto(a.op()));
      RETURN_IF_ERROR(AddOperand(a.lhs(), "lhs", spec));
      if (a.has_scalar()) {
        spec.scalar = FromProto(a.scalar());
        spec.scalar_first = a.scalar_first();
      } else {
        RETURN_IF_ERROR(AddOperand(a.rhs(), "rhs", spec));
      }
      break;
    }
    case v1::Op::kUnary: {
      spec.kind = Kind::kUnary;
      ASSIGN_OR_RETURN(spec.unary, FromProto(op.unary().op()));
      RETURN_IF_ERROR(AddOperand(op.unary().x(), "x", spec));
      const core::OpRow& row = core::RowOf(spec);
      const auto& args = op.unary().args();
      if (args.size() > row.param_count) {
        return absl::InvalidArgumentError(absl::StrCat(
            core::ToAbsl(row.name), " takes ", row.param_count,
            " numeric argument(s) in UnaryArgs.args, not ", args.size()));
      }
      for (int i = 0; i < row.param_count; ++i) {
        spec.args[i] = i < args.size() ? args[i] : row.param_defaults[i];
      }
      break;
    }
    case v1::Op::kMatmul:
      spec.kind = Kind::kMatMul;
      RETURN_IF_ERROR(AddOperand(op.matmul().lhs(), "lhs", spec));
      RETURN_IF_ERROR(AddOperand(op.matmul().rhs(), "rhs", spec));
      break;
    case v1::Op::kLinear:
      spec.kind = Kind::kLinear;
      RETURN_IF_ERROR(AddOperand(op.linear().x(), "x", spec));
      RETURN_IF_ERROR(AddOperand(op.linear().weight(), "weight", spec));
      if (op.linear().has_bias()) {
        RETURN_IF_ERROR(AddOperand(op.linear().bias(), "bias", spec));
      }
      break;
    case v1::Op::kReduce: {
      spec.kind = Kind::kReduce;
      ASSIGN_OR_RETURN(spec.reduce, FromProto(op.reduce().op()));
      RETURN_IF_ERROR(AddOperand(op.reduce().x(), "x", spec));
      if (op.reduce().has_dim()) spec.dim = op.reduce().dim();
      if (!op.reduce().dims().empty()) {
        if (spec.dim.has_value()) {
          return absl::InvalidArgumentError(
              "reduce: give either `dim` or `dims`, not both");
        }
        spec.reduce_dims.assign(op.reduce().dims().begin(),
                                op.reduce().dims().end());
      }
      spec.keepdim = op.reduce().keepdim();
      break;
    }
    case v1::Op::kSoftmax:
      spec.kind = Kind::kSoftmax;
      RETURN_IF_ERROR(AddOperand(op.softmax().x(), "x", spec));
      spec.dim = op.softmax().dim();
      spec.log = op.softmax().log();
      break;
    case v1::Op::kConv2D: {
      const v1::Conv2dArgs& a = op.conv2d();
      spec.kind = Kind::kConv2d;
      RETURN_IF_ERROR(AddOperand(a.x(), "x", spec));
      RETURN_IF_ERROR(AddOperand(a.weight(), "weight", spec));
      if (a.has_bias()) RETURN_IF_ERROR(AddOperand(a.bias(), "bias", spec));
      spec.window.stride.assign(a.stride().begin(), a.stride().end());
      spec.window.padding.assign(a.padding().begin(), a.padding().end());
      spec.window.dilation.assign(a.dilation().begin(), a.dilation().end());
      if (a.has_groups()) spec.window.groups = a.groups();
      break;
    }
    case v1::Op::kPool2D: {
      const v1::Pool2dArgs& a = op.pool2d();
      ASSIGN_OR_RETURN(
          const core::OpRow* row,
          WireRow(kWire_pool2d, a.op(), "pool op", kWireNames_pool2d));
      spec.kind = row->kind;
      if (spec.kind == Kind::kAdaptiveAvgPool2d &&
          (!a.kernel_size().empty() || !a.stride().empty() ||
           !a.padding().empty() || !a.dilation().empty() || a.exclude_pad())) {
        return absl::InvalidArgumentError(
            "adaptive_avg_pool2d takes only output_size");
      }
      RETURN_IF_ERROR(AddOperand(a.x(), "x", spec));
      spec.window.kernel_size.assign(a.kernel_size().begin(),
                                     a.kernel_size().end());
      spec.window.stride.assign(a.stride().begin(), a.stride().end());
      spec.window.padding.assign(a.padding().begin(), a.padding().end());
      spec.window.dilation.assign(a.dilation().begin(), a.dilation().end());
      spec.window.count_include_pad = !a.exclude_pad();
      spec.window.output_size.assign(a.output_size().begin(),
                                     a.output_size().end());
      if (spec.kind != Kind::kAdaptiveAvgPool2d &&
          !spec.window.output_size.empty()) {
        return absl::InvalidArgumentError(
            "output_size is for ADAPTIVE_AVG_POOL only");
      }
      break;
    }
    case v1::Op::kRequiresGrad: {
      const v1::RequiresGradArgs& a = op.requires_grad();
      spec.kind = Kind::kRequiresGrad;
      RETURN_IF_ERROR(AddOperand(a.x(), "x", spec));
      if (a.has_requires_grad()) spec.requires_grad = a.requires_grad();
      break;
    }
    case v1::Op::kBackward: {
      const v1::BackwardArgs& a = op.backward();
      spec.kind = Kind::kBackward;
      RETURN_IF_ERROR(AddOperand(a.root(), "root", spec));
      if (a.has_gradient()) {
        RETURN_IF_ERROR(AddOperand(a.gradient(), "gradient", spec));
      }
      spec.retain_graph = a.retain_graph();
      break;
    }
    case v1::Op::kGrad: {
      spec.kind = Kind::kGrad;
      RETURN_IF_ERROR(AddOperand(op.grad().x(), "x", spec));
      break;
    }
    case v1::Op::kZeroGrad: {
      spec.kind = Kind::kZeroGrad;
      for (const v1::Operand& t : op.zero_grad().tensors()) {
        RETURN_IF_ERROR(AddOperand(t, "tensors", spec));
      }
      break;
    }
    case v1::Op::kDetach: {
      spec.kind = Kind::kDetach;
      RETURN_IF_ERROR(AddOperand(op.detach().x(), "x", spec));
      break;
    }
    case v1::Op::kOptimizerStep: {
      const v1::OptimizerStepArgs& a = op.optimizer_step();
      spec.kind = Kind::kOptimizerStep;
      core::OptimizerArgs& o = spec.optimizer;
      ASSIGN_OR_RETURN(
          o.kind, WireVariant<core::OptimizerKind>(kWire_optimizer_step,
                                                   a.kind(), "optimizer kind",
                                                   kWireNames_optimizer_step));
      for (const v1::Operand& p : a.params()) {
        RETURN_IF_ERROR(AddOperand(p, "params", spec));
      }
      for (const v1::Operand& s : a.state()) {
        RETURN_IF_ERROR(AddOperand(s, "state", spec));
      }
      if (a.has_lr()) o.lr = a.lr();
      o.weight_decay = a.weight_decay();
      o.maximize = a.maximize();
      o.momentum = a.momentum();
      o.dampening = a.dampening();
      o.nesterov = a.nesterov();
      if (a.has_beta1()) o.beta1 = a.beta1();
      if (a.has_beta2()) o.beta2 = a.beta2();
      if (a.has_eps()) o.eps = a.eps();
      o.step = a.step();
      break;
    }
    case v1::Op::kDropout: {
      const v1::DropoutArgs& a = op.dropout();
      spec.kind = Kind::kDropout;
      RETURN_IF_ERROR(AddOperand(a.x(), "x", spec));
      if (a.has_p()) spec.dropout_p = a.p();
      if (a.has_training()) spec.train = a.training();
      if (a.has_seed()) spec.seed = a.seed();
      break;
    }
    case v1::Op::kNorm: {
      const v1::NormArgs& a = op.norm();
      spec.kind = Kind::kNorm;
      core::NormArgs& n = spec.norm;
      ASSIGN_OR_RETURN(
          n.kind, WireVariant<core::NormKind>(kWire_norm, a.op(), "norm op",
                                              kWireNames_norm));
      RETURN_IF_ERROR(AddOperand(a.input(), "input", spec));
      n.weight = a.has_weight();
      if (n.weight) RETURN_IF_ERROR(AddOperand(a.weight(), "weight", spec));
      n.bias = a.has_bias();
      if (n.bias) RETURN_IF_ERROR(AddOperand(a.bias(), "bias", spec));
      if (a.has_running_mean() != a.has_running_var()) {
        return absl::InvalidArgumentError(
            "running_mean and running_var are given together or not at all");
      }
      n.running_stats = a.has_running_mean();
      if (n.running_stats) {
        RETURN_IF_ERROR(AddOperand(a.running_mean(), "running_mean", spec));
        RETURN_IF_ERROR(AddOperand(a.running_var(), "running_var", spec));
      }
      spec.train = a.has_training() && a.training();
      if (a.has_momentum()) n.momentum = a.momentum();
      if (a.has_eps()) n.eps = a.eps();
      n.normalized_shape.assign(a.normalized_shape().begin(),
                                a.normalized_shape().end());
      break;
    }
    case v1::Op::kLoss: {
      const v1::LossArgs& a = op.loss();
      spec.kind = Kind::kLoss;
      ASSIGN_OR_RETURN(
          spec.loss, WireVariant<core::LossKind>(kWire_loss, a.op(), "loss op",
                                                 kWireNames_loss));
      switch (a.reduction()) {
        case v1::REDUCTION_MEAN:
          spec.reduction = core::LossReduction::kMean;
          break;
        case v1::REDUCTION_SUM:
          spec.reduction = core::LossReduction::kSum;
          break;
        case v1::REDUCTION_NONE:
          spec.reduction = core::LossReduction::kNone;
          break;
        default:
          return absl::InvalidArgumentError(absl::StrCat(
              "unknown reduction ", static_cast<int>(a.reduction())));
      }
      if (a.has_ignore_index()) spec.ignore_index = a.ignore_index();
      RETURN_IF_ERROR(AddOperand(a.input(), "input", spec));
      RETURN_IF_ERROR(AddOperand(a.target(), "target", spec));
      break;
    }
    case v1::Op::kWhere: {
      const v1::WhereArgs& a = op.where();
      spec.kind = Kind::kWhere;
      RETURN_IF_ERROR(AddOperand(a.condition(), "condition", spec));
      RETURN_IF_ERROR(AddBound(a.has_input(), a.input(), a.has_input_scalar(),
                               a.input_scalar(), "where", "input",
                               /*required=*/true, spec.where_input, spec));
      RETURN_IF_ERROR(AddBound(a.has_other(), a.other(), a.has_other_scalar(),
                               a.other_scalar(), "where", "other",
                               /*required=*/true, spec.where_other, spec));
      break;
    }
    case v1::Op::kClamp: {
      const v1::ClampArgs& a = op.clamp();
      spec.kind = Kind::kClamp;
      RETURN_IF_ERROR(AddOperand(a.x(), "x", spec));
      RETURN_IF_ERROR(AddBound(a.has_min(), a.min(), a.has_min_scalar(),
                               a.min_scalar(), "clamp", "min",
                               /*required=*/false, spec.clamp_min, spec));
      RETURN_IF_ERROR(AddBound(a.has_max(), a.max(), a.has_max_scalar(),
                               a.max_scalar(), "clamp", "max",
                               /*required=*/false, spec.clamp_max, spec));
      break;
    }
    case v1::Op::kPermute:
      spec.kind = Kind::kPermute;
      RETURN_IF_ERROR(AddOperand(op.permute().x(), "x", spec));
      spec.dims.assign(op.permute().dims().begin(), op.permute().dims().end());
      break;
    case v1::Op::kTranspose:
      spec.kind = Kind::kTranspose;
      RETURN_IF_ERROR(AddOperand(op.transpose().x(), "x", spec));
      spec.dim = op.transpose().dim0();
      spec.dim1 = op.transpose().dim1();
      break;
    case v1::Op::kReshape:
      spec.kind = Kind::kReshape;
      RETURN_IF_ERROR(AddOperand(op.reshape().x(), "x", spec));
      spec.dims.assign(op.reshape().shape().begin(),
                       op.reshape().shape().end());
      break;
    case v1::Op::kNarrow:
      spec.kind = Kind::kNarrow;
      RETURN_IF_ERROR(AddOperand(op.narrow().x(), "x", spec));
      spec.dim = op.narrow().dim();
      spec.start = op.narrow().start();
      spec.length = op.narrow().length();
      break;
    case v1::Op::kSelect:
      spec.kind = Kind::kSelect;
      RETURN_IF_ERROR(AddOperand(op.select().x(), "x", spec));
      spec.dim = op.select().dim();
      spec.start = op.select().index();
      break;
    case v1::Op::kCat:
      spec.kind = Kind::kCat;
      if (op.cat().xs().empty()) {
        return absl::InvalidArgumentError(
            "cat expects a non-empty list of tensors");
      }
      for (const v1::Operand& x : op.cat().xs()) {
        RETURN_IF_ERROR(AddOperand(x, "xs", spec));
      }
      spec.dim = op.cat().dim();
      break;
    case v1::Op::kCast: {
      spec.kind = Kind::kCast;
      RETURN_IF_ERROR(AddOperand(op.cast().x(), "x", spec));
      ASSIGN_OR_RETURN(spec.dtype, FromProto(op.cast().dtype()));
      break;
    }
    case v1::Op::kInPlace: {
      const v1::InPlaceArgs& a = op.in_place();
      spec.kind = Kind::kInPlace;
      ASSIGN_OR_RETURN(spec.in_place, FromProto(a.op()));
      RETURN_IF_ERROR(AddOperand(a.target(), "target", spec));
      if (a.has_scalar()) {
        if (spec.in_place == core::InPlaceOp::kAxpy) {
          return absl::InvalidArgumentError(
              "AXPY_ takes a tensor `other`, not a scalar");
        }
        spec.scalar = FromProto(a.scalar());
      } else {
        RETURN_IF_ERROR(AddOperand(a.other(), "other", spec));
      }
      if (a.has_alpha()) spec.alpha = FromProto(a.alpha());
      break;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("op kind is not set or unknown (",
                       static_cast<int>(op.kind_case()), ")"));
  }
  spec.no_grad = op.no_grad();
  return absl::OkStatus();
}

absl::StatusOr<core::FillSpec> FromProto(const v1::Fill& fill) {
  core::FillSpec spec;
  switch (fill.kind()) {
    case v1::Fill::ZEROS: spec.kind = core::FillSpec::Kind::kZeros; break;
    case v1::Fill::ONES: spec.kind = core::FillSpec::Kind::kOnes; break;
    case v1::Fill::FULL:
      spec.kind = core::FillSpec::Kind::kFull;
      spec.value = fill.value();
      break;
    case v1::Fill::ARANGE:
      spec.kind = core::FillSpec::Kind::kArange;
      spec.start = fill.start();
      spec.step = fill.step() == 0 ? 1 : fill.step();
      break;
    case v1::Fill::RAND:
      spec.kind = core::FillSpec::Kind::kRand;
      if (fill.low() != 0 || fill.high() != 0) {
        spec.low = fill.low();
        spec.high = fill.high();
      }
      break;
    case v1::Fill::RANDN:
      spec.kind = core::FillSpec::Kind::kRandn;
      spec.mean = fill.mean();
      spec.stddev = fill.std() == 0 ? 1 : fill.std();
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "fill kind is not set or unknown (", static_cast<int>(fill.kind()),
          "); expected ZEROS, ONES, FULL, ARANGE, RAND or RANDN"));
  }
  if (fill.has_seed()) spec.seed = fill.seed();
  return spec;
}

v1::OpFamily ToProto(core::OpKind kind) {
  switch (kind) {
    case core::OpKind::kFill:
      return v1::FILL;
    case core::OpKind::kRandomFill:
      return v1::RANDOM_FILL;
    case core::OpKind::kCast:
      return v1::CAST;
    case core::OpKind::kBinary:
      return v1::BINARY_FAMILY;
    case core::OpKind::kMatMul:
      return v1::MATMUL_FAMILY;
    case core::OpKind::kUnary:
      return v1::UNARY_FAMILY;
    case core::OpKind::kReduce:
      return v1::REDUCE_FAMILY;
    case core::OpKind::kWhere:
      return v1::WHERE_FAMILY;
  }
  return v1::OP_FAMILY_UNSPECIFIED;
}

absl::StatusOr<core::OpKind> FromProto(v1::OpFamily family) {
  for (int op = 0; op < core::kOpKindCount; ++op) {
    if (ToProto(static_cast<core::OpKind>(op)) == family) {
      return static_cast<core::OpKind>(op);
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown op family ", static_cast<int>(family)));
}

core::Capabilities FromProto(
    const google::protobuf::RepeatedPtrField<v1::Capability>& caps) {
  core::Capabilities out;
  for (const v1::Capability& c : caps) {
    const absl::StatusOr<core::OpKind> kind = FromProto(c.family());
    if (!kind.ok()) continue;  // a family this build does not plan
    for (core::DType d : core::kEveryDType) {
      if (c.dtypes() & (uint32_t{1} << static_cast<int>(d))) {
        out.Allow(*kind, d);
      }
    }
  }
  return out;
}

void ToProto(const core::Capabilities& caps,
             google::protobuf::RepeatedPtrField<v1::Capability>* out) {
  for (int op = 0; op < core::kOpKindCount; ++op) {
    uint32_t dtypes = 0;
    for (core::DType d : core::kEveryDType) {
      if (caps.Has(static_cast<core::OpKind>(op), d)) {
        dtypes |= uint32_t{1} << static_cast<int>(d);
      }
    }
    if (dtypes == 0) continue;
    v1::Capability* cap = out->Add();
    cap->set_family(ToProto(static_cast<core::OpKind>(op)));
    cap->set_dtypes(dtypes);
  }
}

}  // namespace tensord::wire
