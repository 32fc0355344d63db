// Internal: bridges std::string_view (the public API's type) to Abseil.
//
// Debian's Abseil is built with its own absl::string_view rather than an
// alias of std::string_view, so absl::StrCat and friends do not accept a
// std::string_view directly.
// Thread-safety: stateless.
#ifndef TENSORD_CORE_BASE_ABSL_COMPAT_H_
#define TENSORD_CORE_BASE_ABSL_COMPAT_H_

#include <string_view>

#include "absl/strings/string_view.h"

namespace tensord::core {

inline absl::string_view ToAbsl(std::string_view s) {
  return absl::string_view(s.data(), s.size());
}

// The other way, for absl's strings (e.g. absl::Status::message()).
inline std::string_view FromAbsl(absl::string_view s) {
  return std::string_view(s.data(), s.size());
}

}  // namespace tensord::core

#endif  // TENSORD_CORE_BASE_ABSL_COMPAT_H_
