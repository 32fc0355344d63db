// Pagination of the list RPCs (ListTensors, ListSessions, ListAllTensors).
//
// A list reply must fit a default client's 4 MiB receive limit however many
// sessions and tensors the server holds, so each reply is one page: at most
// `page_size` entries (0 = kDefaultListPageSize; capped at
// kMaxListPageSize). Entries are ordered by a key that only grows (tensor
// handles, session serial numbers), and a page's token is the key of its
// last entry, so a page never repeats an entry and entries added between
// pages appear on later pages when their key is larger. Tokens are opaque to
// clients ("p1." and 16 hex digits).
// Thread-safety: pure functions.
#ifndef TENSORD_SERVER_LIST_PAGE_H_
#define TENSORD_SERVER_LIST_PAGE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tensord::server {

inline constexpr uint32_t kDefaultListPageSize = 1000;
inline constexpr uint32_t kMaxListPageSize = 1000;

// Where a page starts and how long it is.
struct PageCursor {
  uint64_t after = 0;      // entries with a key above this
  bool from_start = true;  // no token: from the first entry
  size_t size = kDefaultListPageSize;
};

// Reads a request's page fields. INVALID_ARGUMENT for a token this server
// did not make.
absl::StatusOr<PageCursor> ParsePageRequest(uint32_t page_size,
                                            std::string_view page_token);

// The token for the page after the one ending at key `last`.
std::string NextPageToken(uint64_t last);

// Calls `emit(item)` for the entries of `items` (sorted by `key(item)`,
// strictly increasing) that belong to the page, and returns the next
// page's token ("" when this page is the last).
template <typename Items, typename Key, typename Emit>
std::string EmitPage(const Items& items, const PageCursor& cursor, Key key,
                     Emit emit) {
  auto it = items.begin();
  if (!cursor.from_start) {
    it = std::upper_bound(
        items.begin(), items.end(), cursor.after,
        [&](uint64_t after, const auto& item) { return after < key(item); });
  }
  size_t emitted = 0;
  for (; it != items.end() && emitted < cursor.size; ++it, ++emitted) {
    emit(*it);
  }
  if (it == items.end() || emitted == 0) return "";
  return NextPageToken(key(*std::prev(it)));
}

}  // namespace tensord::server

#endif  // TENSORD_SERVER_LIST_PAGE_H_
