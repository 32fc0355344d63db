#include "core/base/op_table.h"

namespace tensord::core {

#include "core/op_rows.inc"  // generated: kOpRows, kFirstRowOfKind, kVariantOf

static_assert(std::size(kFirstRowOfKind) == kOpSpecKindCount);
static_assert(std::size(kVariantOf) == kOpSpecKindCount);

bool OpRow::Differentiable(size_t input) const {
  switch (grad_inputs) {
    case GradInputs::kAll:
      return true;
    case GradInputs::kNone:
      return false;
    case GradInputs::kFirst:
      return input == 0;
    case GradInputs::kAllButFirst:
      return input != 0;
  }
  return false;
}

bool OpRow::SavesInput(size_t input) const {
  switch (saves_inputs) {
    case SavedInputs::kAll:
      return true;
    case SavedInputs::kNone:
      return false;
    case SavedInputs::kFirst:
      return input == 0;
  }
  return true;
}

std::span<const OpRow> OpRows() { return kOpRows; }

size_t RowIndexOf(const OpSpec& op) {
  const int kind = static_cast<int>(op.kind);
  return static_cast<size_t>(kFirstRowOfKind[kind] + kVariantOf[kind](op));
}

const OpRow& RowOf(const OpSpec& op) { return kOpRows[RowIndexOf(op)]; }

const OpRow& RowOf(OpSpecKind kind, int variant) {
  return kOpRows[kFirstRowOfKind[static_cast<int>(kind)] + variant];
}

const OpRow* FindOpRow(std::string_view id) {
  for (const OpRow& row : kOpRows) {
    if (row.id == id) return &row;
  }
  return nullptr;
}

}  // namespace tensord::core
