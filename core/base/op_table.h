// The op table: every op tensord runs, one row each, read from
// proto/tensord/v1/ops.json (by core/base/gen_op_table.py, at configure time).
// A row holds what is true of an op whatever its operands: its names (the
// op's, its grad_fn's), its arity, which inputs take gradients, what its
// backward saves and which formula computes it, the planner rule it uses,
// and how the C++ and Python clients spell it. The code that runs ops asks
// the table instead of switching over the op's kind: OpName, GradFnName,
// autograd's recording rules and the backward dispatch all read rows.
//
// Adding an op: a row in ops.json (README "How to add an op" lists the few
// files besides). Every row is run against PyTorch by
// tests/python/client/test_op_table.py and its C++ spelling compiled by
// tests/client/op_table_methods_test.cc.
// Thread-safety: constant data.
#ifndef TENSORD_CORE_BASE_OP_TABLE_H_
#define TENSORD_CORE_BASE_OP_TABLE_H_

#include <cstddef>
#include <span>
#include <string_view>

#include "core/base/ops.h"

namespace tensord::core {

// Which inputs of an op gradients flow to.
enum class GradInputs {
  kAll,          // every input
  kNone,         // none (comparisons, argmax, in-place and autograd ops)
  kFirst,        // inputs[0] only (a loss's class targets take none)
  kAllButFirst,  // all but inputs[0] (where's condition takes none)
};
// What a unary op does with an integer (or bool) input: compute in
// float32 (exp), keep its dtype (neg, hardtanh), or refuse it, quoting
// torch's kernel (silu: "silu_cpu" not implemented for 'Long').
enum class UnaryIntegers { kPromote, kKeep, kRefuse };
// Which inputs' values an op's backward reads (the rest keep only their
// metadata in the graph, and the graph does not hold their memory).
enum class SavedInputs { kAll, kNone, kFirst };

struct OpRow {
  std::string_view id;    // unique: "add", "gelu_tanh", "sgd_step"
  std::string_view name;  // for messages (OpName): "gelu", "SGD.step", "to"
  OpSpecKind kind;
  int variant;                 // the row within its kind (op.unary, ...)
  int min_inputs, max_inputs;  // max -1: any number
  GradInputs grad_inputs;
  SavedInputs saves_inputs;
  bool saves_output;  // the backward reads the output's values
  // PyTorch's grad_fn name, and the names it takes instead when the op is
  // `scalar (op) tensor`, tensor (op) tensor, over every dim, or with a
  // bias (empty: as the default).
  std::string_view grad_fn, grad_fn_scalar_first, grad_fn_tensor_tensor,
      grad_fn_all_dims, grad_fn_bias;
  std::string_view backward;  // the GradMath formula (empty: none)
  std::string_view emit;      // what runs it (Executor::Emit...)
  std::string_view plan;      // the planner rule (core/planner/planner.h)
  std::string_view cpp;       // the C++ client's spelling, e.g. "x.silu()"
  std::string_view python;    // the Python client's, e.g. "F.silu(x)"
  // Unary rows: integer inputs; torch's kernel name for a refusal; a bool
  // input's own message (empty: "<kernel_name>" not implemented for
  // 'Bool'); the numeric arguments' count and defaults (UnaryArgs.args).
  UnaryIntegers integers;
  std::string_view kernel_name, bool_error;
  int param_count;
  double param_defaults[2];
  // Of its kind: the op gives back inputs[0] (in-place ops, requires_grad_,
  // backward, zero_grad, an optimizer step) rather than a new tensor; its
  // result or errors depend on autograd state only the server holds (a
  // grad that may be None), so a client cannot plan it ahead.
  bool returns_input;
  bool autograd_state;
  // The backward reads the forward's plan (the window, a loss's broadcast
  // shape): autograd keeps it with the node, so the backward plans nothing.
  bool saves_plan;

  bool Differentiable(size_t input) const;
  bool SavesInput(size_t input) const;
};

// Every row, in the table's order (grouped by kind).
std::span<const OpRow> OpRows();
// The row of `op` (its kind and variant), and its index in OpRows().
const OpRow& RowOf(const OpSpec& op);
size_t RowIndexOf(const OpSpec& op);
// The row of `kind`'s `variant`th op (UnaryOp::kSilu's: kUnary, kSilu).
const OpRow& RowOf(OpSpecKind kind, int variant);
// The row with id `id`, or nullptr.
const OpRow* FindOpRow(std::string_view id);

}  // namespace tensord::core

#endif  // TENSORD_CORE_BASE_OP_TABLE_H_
