#include "server/byte_size.h"

#include <cctype>
#include <cmath>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tensord::server {

absl::StatusOr<uint64_t> ParseByteSize(std::string_view text) {
  auto invalid = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid byte size '", std::string(text),
        "': expected a number with an optional unit (B, KB, MB, GB, TB, KiB, "
        "MiB, GiB, TiB), e.g. 8GiB"));
  };
  // Debian's absl has its own string_view type; work on a std::string.
  const std::string owned(text);
  absl::string_view s = absl::StripAsciiWhitespace(owned);
  size_t split = 0;
  while (split < s.size() &&
         (std::isdigit(static_cast<unsigned char>(s[split])) || s[split] == '.')) {
    ++split;
  }
  double number = 0;
  if (split == 0 || !absl::SimpleAtod(s.substr(0, split), &number)) {
    return invalid();
  }
  std::string unit = absl::AsciiStrToLower(
      absl::StripAsciiWhitespace(s.substr(split)));
  double scale = 0;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "kb" || unit == "k") scale = 1e3;
  else if (unit == "mb" || unit == "m") scale = 1e6;
  else if (unit == "gb" || unit == "g") scale = 1e9;
  else if (unit == "tb" || unit == "t") scale = 1e12;
  else if (unit == "kib") scale = 1024.0;
  else if (unit == "mib") scale = 1024.0 * 1024;
  else if (unit == "gib") scale = 1024.0 * 1024 * 1024;
  else if (unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
  else return invalid();
  const double bytes = number * scale;
  if (!std::isfinite(bytes) || bytes >= 9.2e18) return invalid();
  return static_cast<uint64_t>(std::llround(bytes));
}

}  // namespace tensord::server
