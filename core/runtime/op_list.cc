#include "core/runtime/op_list.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status.h"

namespace tensord::core {

absl::Status OpListFailure(size_t i, const OpSpec& op, const absl::Status& why,
                           const std::function<std::string(size_t)>& describe) {
  constexpr size_t kDescribed = 8;
  std::vector<std::string> described;
  for (size_t j = 0; j < std::min(op.inputs.size(), kDescribed); ++j) {
    const Operand& operand = op.inputs[j];
    std::string d =
        operand.is_result  ? absl::StrCat("result of op #", operand.result_of)
        : operand.is_input ? absl::StrCat("input #", operand.input)
                           : absl::StrCat("handle ", operand.handle);
    if (std::string meta = describe(j); !meta.empty()) {
      absl::StrAppend(&d, " ", meta);
    }
    described.push_back(std::move(d));
  }
  if (op.inputs.size() > kDescribed) {
    described.push_back(
        absl::StrCat("... ", op.inputs.size() - kDescribed, " more"));
  }
  if (op.scalar.has_value()) {
    described.push_back(absl::StrCat("scalar ", op.scalar->ToString()));
  }
  return Rewrapped(why, why.code(),
                   absl::StrCat("op #", i, " (", OpName(op), "; operands: ",
                                absl::StrJoin(described, ", "),
                                "): ", why.message()));
}

}  // namespace tensord::core
