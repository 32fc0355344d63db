// The elementwise, unary and reduction op families every device runs, as
// plain enums. Abseil-free C++17, so that the CUDA kernels (compiled by nvcc
// without Abseil) and the scalar semantics (core/scalar_ops.h) name the very
// enums the planner and the Device interface use: one copy of each.
// Their names for messages are in core/device.h (BinaryOpName, ...).
// Thread-safety: plain enums.
#ifndef TENSORD_CORE_OP_KINDS_H_
#define TENSORD_CORE_OP_KINDS_H_

namespace tensord::core {

// Elementwise binary ops. The comparisons (kEq .. kGe) produce bool.
enum class BinaryOp : int {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kMaximum,
  kMinimum,
  kPow,
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
};

// Elementwise unary ops; input and output share one dtype (the planner
// casts integer inputs of the floating ops to float32 first).
enum class UnaryOp : int {
  kNeg,
  kAbs,
  kExp,
  kLog,
  kSqrt,
  kRelu,
  kSigmoid,
  kTanh,
  kSilu,      // x * sigmoid(x)
  kGelu,      // x * Phi(x), exact (erf)
  kGeluTanh,  // gelu's tanh approximation (approximate='tanh')
};

// Reductions over one axis (or all elements). kArgmax produces int64; the
// others keep the input dtype (the planner casts integer sums to int64).
// kNorm is the L2 (Frobenius) norm, sqrt(sum(x^2)).
enum class ReduceOp : int { kSum, kMean, kMax, kMin, kArgmax, kNorm };

}  // namespace tensord::core

#endif  // TENSORD_CORE_OP_KINDS_H_
