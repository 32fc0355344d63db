// Status helpers shared by core, server and tools.
//
// tensord reports every failure as absl::Status; nothing in core or server
// aborts on bad input. These macros keep the early-return plumbing short.
// Thread-safety: stateless.
#ifndef TENSORD_CORE_BASE_STATUS_H_
#define TENSORD_CORE_BASE_STATUS_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"

#define TENSORD_STATUS_CONCAT_INNER_(a, b) a##b
#define TENSORD_STATUS_CONCAT_(a, b) TENSORD_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status); returns it from the calling function if
// it is not OK.
#define RETURN_IF_ERROR(expr)                       \
  do {                                              \
    ::absl::Status tensord_status_ = (expr);        \
    if (!tensord_status_.ok()) return tensord_status_; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, MakeX());` evaluates an absl::StatusOr<T>; on
// error returns its status, otherwise moves the value into `lhs`.
#define ASSIGN_OR_RETURN(lhs, rexpr)                                         \
  TENSORD_ASSIGN_OR_RETURN_IMPL_(                                            \
      TENSORD_STATUS_CONCAT_(tensord_statusor_, __LINE__), lhs, rexpr)

#define TENSORD_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                    \
  if (!statusor.ok()) return std::move(statusor).status();    \
  lhs = std::move(statusor).value()

namespace tensord::core {

// A new status of `code` and `message` with `from`'s payloads (why it was
// refused, core/base/refusal.h; torch's exception class, core/base/error_kind.h), for
// whoever rewords a status, as the executor's "op #k (...)" prefix does.
inline absl::Status Rewrapped(const absl::Status& from, absl::StatusCode code,
                              std::string_view message) {
  absl::Status out(code, std::string(message));
  from.ForEachPayload([&out](auto url, const absl::Cord& payload) {
    out.SetPayload(url, payload);
  });
  return out;
}

}  // namespace tensord::core

#endif  // TENSORD_CORE_BASE_STATUS_H_
