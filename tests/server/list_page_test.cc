#include "server/list_page.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tensord::server {
namespace {

// Pages through `keys` with page size `size`; returns every key seen, in
// order, and the number of pages.
std::vector<uint64_t> PageThrough(const std::vector<uint64_t>& keys,
                                  uint32_t size, int* pages) {
  std::vector<uint64_t> seen;
  std::string token;
  *pages = 0;
  do {
    absl::StatusOr<PageCursor> cursor = ParsePageRequest(size, token);
    EXPECT_TRUE(cursor.ok()) << cursor.status();
    if (!cursor.ok()) break;
    token = EmitPage(
        keys, *cursor, [](uint64_t k) { return k; },
        [&](uint64_t k) { seen.push_back(k); });
    ++*pages;
  } while (!token.empty() && *pages < 1000);
  return seen;
}

TEST(ListPageTest, PagesCoverEveryEntryOnceInOrder) {
  std::vector<uint64_t> keys;
  for (uint64_t k = 5; k < 5 + 2500 * 3; k += 3) keys.push_back(k);
  int pages = 0;
  EXPECT_EQ(PageThrough(keys, 0, &pages), keys);  // default: 1000 a page
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(PageThrough(keys, 7, &pages), keys);
  EXPECT_EQ(pages, (2500 + 6) / 7);
  EXPECT_EQ(PageThrough(keys, 1u << 30, &pages), keys);  // capped at 1000
  EXPECT_EQ(pages, 3);
}

TEST(ListPageTest, ExactMultipleEndsWithoutAnEmptyPage) {
  const std::vector<uint64_t> keys = {1, 2, 3, 4};
  int pages = 0;
  EXPECT_EQ(PageThrough(keys, 2, &pages), keys);
  EXPECT_EQ(pages, 2);
  EXPECT_EQ(PageThrough({}, 2, &pages), std::vector<uint64_t>{});
  EXPECT_EQ(pages, 1);
}

TEST(ListPageTest, EntriesRemovedBetweenPagesAreNotRepeatedOrSkipped) {
  std::vector<uint64_t> keys = {10, 20, 30, 40, 50};
  absl::StatusOr<PageCursor> first = ParsePageRequest(2, "");
  ASSERT_TRUE(first.ok());
  std::vector<uint64_t> seen;
  auto key = [](uint64_t k) { return k; };
  auto emit = [&](uint64_t k) { seen.push_back(k); };
  std::string token = EmitPage(keys, *first, key, emit);
  keys.erase(keys.begin() + 1);  // 20, the page's last entry, goes
  absl::StatusOr<PageCursor> second = ParsePageRequest(2, token);
  ASSERT_TRUE(second.ok());
  token = EmitPage(keys, *second, key, emit);
  EXPECT_EQ(seen, (std::vector<uint64_t>{10, 20, 30, 40}));
  EXPECT_FALSE(token.empty());
}

TEST(ListPageTest, ForeignTokensAreInvalidArgumentAndEchoedShort) {
  for (const std::string& token :
       {std::string("garbage"), std::string("p1.12"),
        std::string("p1.zzzzzzzzzzzzzzzz"), std::string("p2.0000000000000001"),
        std::string(100000, 'p')}) {
    absl::StatusOr<PageCursor> cursor = ParsePageRequest(10, token);
    ASSERT_FALSE(cursor.ok()) << token;
    EXPECT_EQ(cursor.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(cursor.status().message().find("page_token"), std::string::npos);
    EXPECT_LT(cursor.status().message().size(), 400u);
  }
}

}  // namespace
}  // namespace tensord::server
