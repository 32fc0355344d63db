// What Execute and RunProgram share about a list of ops: the message of
// the op that fails. The list's loop itself is Runtime::RunList
// (core/executor/executor.cc).
#ifndef TENSORD_CORE_RUNTIME_OP_LIST_H_
#define TENSORD_CORE_RUNTIME_OP_LIST_H_

#include <cstddef>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "core/base/ops.h"

namespace tensord::core {

// `why` (op #i's own error) reworded with the same code and payloads as
// "op #<i> (<name>; operands: <each operand>): <why>": each operand named
// ("handle 17", "result of op #2", "input #0") with `describe(j)` after it
// when that is not empty ("[2, 3] float32"), at most 8 of them (a cat of a
// thousand tensors must not make a message larger than a reply's metadata
// may be), and the op's scalar.
absl::Status OpListFailure(size_t i, const OpSpec& op, const absl::Status& why,
                           const std::function<std::string(size_t)>& describe);

}  // namespace tensord::core

#endif  // TENSORD_CORE_RUNTIME_OP_LIST_H_
