#include "server/list_page.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/op_checks.h"

namespace tensord::server {
namespace {

constexpr std::string_view kTokenPrefix = "p1.";

}  // namespace

absl::StatusOr<PageCursor> ParsePageRequest(uint32_t page_size,
                                            std::string_view page_token) {
  PageCursor cursor;
  cursor.size = page_size == 0 ? kDefaultListPageSize
                               : std::min(page_size, kMaxListPageSize);
  if (page_token.empty()) return cursor;
  const std::string_view hex =
      page_token.substr(std::min(page_token.size(), kTokenPrefix.size()));
  uint64_t after = 0;
  if (page_token.substr(0, kTokenPrefix.size()) != kTokenPrefix ||
      hex.size() != 16 ||
      !absl::SimpleHexAtoi(absl::string_view(hex.data(), hex.size()), &after)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "page_token '", core::Echo(page_token),
        "' is not a token this server gave (pass a reply's next_page_token "
        "as it came, or none for the first page)"));
  }
  cursor.after = after;
  cursor.from_start = false;
  return cursor;
}

std::string NextPageToken(uint64_t last) {
  return absl::StrFormat("%s%016x", kTokenPrefix, last);
}

}  // namespace tensord::server
