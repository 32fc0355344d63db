// The elementwise, unary and reduction op families every device runs, as
// plain enums. Abseil-free C++17, so that the CUDA kernels (compiled by nvcc
// without Abseil) and the scalar semantics (core/base/scalar_ops.h) name the very
// enums the planner and the Device interface use: one copy of each.
// Their names for messages are in core/base/device.h (BinaryOpName, ...).
// Thread-safety: plain enums.
#ifndef TENSORD_CORE_BASE_OP_KINDS_H_
#define TENSORD_CORE_BASE_OP_KINDS_H_

#include "core/op_enums.h"  // generated (core/base/gen_op_table.py)

namespace tensord::core {

// BinaryOp, UnaryOp and ReduceOp (and the other op enums) are generated
// from the op table (proto/tensord/v1/ops.json), one enumerator per row:
//  - BinaryOp: elementwise; the comparisons (kEq .. kGe) produce bool.
//  - UnaryOp: elementwise, input and output of one dtype (the planner casts
//    integer inputs of the floating ops to float32 first). kSilu is
//    x * sigmoid(x), kGelu x * Phi(x) exact (erf), kGeluTanh gelu's tanh
//    approximation (approximate='tanh').
//  - ReduceOp: over one axis, several, or all elements. kArgmax produces
//    int64; the others keep the input dtype (the planner casts integer sums
//    to int64). kNorm is the L2 (Frobenius) norm, sqrt(sum(x^2)).

}  // namespace tensord::core

#endif  // TENSORD_CORE_BASE_OP_KINDS_H_
