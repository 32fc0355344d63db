// Internal: the client's public enums as the wire's, one conversion each.
//
// tensord/client.h numbers DType, BinaryOp, UnaryOp and ReduceOp as
// tensord.proto does, so a conversion is a cast; the static_asserts below
// prove every enumerator against the generated enum at compile time (and
// that neither side has one the other lacks, through the proto's _MAX), so
// adding an op to one and not the other fails the build, not a request.
// Thread-safety: stateless.
#ifndef TENSORD_CLIENT_GRPC_ENUMS_H_
#define TENSORD_CLIENT_GRPC_ENUMS_H_

#include "tensord/client.h"
#include "tensord/v1/tensord.pb.h"

namespace tensord::client::internal {

// True when `client` has the number of `wire`.
template <typename Client, typename Wire>
constexpr bool Same(Client client, Wire wire) {
  return static_cast<int>(client) == static_cast<int>(wire);
}

static_assert(Same(DType::kFloat32, v1::FLOAT32) &&
              Same(DType::kFloat64, v1::FLOAT64) &&
              Same(DType::kInt32, v1::INT32) &&
              Same(DType::kInt64, v1::INT64) && Same(DType::kBool, v1::BOOL) &&
              Same(DType::kFloat16, v1::FLOAT16) &&
              Same(DType::kBFloat16, v1::BFLOAT16) &&
              Same(DType::kBFloat16, v1::DType_MAX));

static_assert(Same(BinaryOp::kAdd, v1::ADD) && Same(BinaryOp::kSub, v1::SUB) &&
              Same(BinaryOp::kMul, v1::MUL) && Same(BinaryOp::kDiv, v1::DIV) &&
              Same(BinaryOp::kMaximum, v1::MAXIMUM) &&
              Same(BinaryOp::kMinimum, v1::MINIMUM) &&
              Same(BinaryOp::kPow, v1::POW) && Same(BinaryOp::kEq, v1::EQ) &&
              Same(BinaryOp::kNe, v1::NE) && Same(BinaryOp::kLt, v1::LT) &&
              Same(BinaryOp::kLe, v1::LE) && Same(BinaryOp::kGt, v1::GT) &&
              Same(BinaryOp::kGe, v1::GE) &&
              Same(BinaryOp::kGe, v1::BinaryOp_MAX));

#define TENSORD_WIRE_ASSERTS
#include "tensord/op_methods.inc"  // generated: UnaryOp against the wire

static_assert(Same(ReduceOp::kSum, v1::SUM) &&
              Same(ReduceOp::kMean, v1::MEAN) &&
              Same(ReduceOp::kMax, v1::MAX) && Same(ReduceOp::kMin, v1::MIN) &&
              Same(ReduceOp::kArgmax, v1::ARGMAX) &&
              Same(ReduceOp::kNorm, v1::NORM) &&
              Same(ReduceOp::kNorm, v1::ReduceOp_MAX));

static_assert(Same(ErrorKind::kRuntimeError, v1::RUNTIME_ERROR) &&
              Same(ErrorKind::kIndexError, v1::INDEX_ERROR) &&
              Same(ErrorKind::kValueError, v1::VALUE_ERROR) &&
              Same(ErrorKind::kTypeError, v1::TYPE_ERROR) &&
              Same(ErrorKind::kTypeError, v1::ErrorKind_MAX));

inline ErrorKind FromProto(v1::ErrorKind kind) {
  return static_cast<ErrorKind>(kind);
}

inline v1::DType ToProto(DType d) { return static_cast<v1::DType>(d); }
inline v1::BinaryOp ToProto(BinaryOp op) {
  return static_cast<v1::BinaryOp>(op);
}
inline v1::UnaryOp ToProto(UnaryOp op) { return static_cast<v1::UnaryOp>(op); }
inline v1::ReduceOp ToProto(ReduceOp op) {
  return static_cast<v1::ReduceOp>(op);
}

}  // namespace tensord::client::internal

#endif  // TENSORD_CLIENT_GRPC_ENUMS_H_
