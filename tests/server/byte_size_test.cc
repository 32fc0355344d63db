#include "server/byte_size.h"

#include <gtest/gtest.h>

namespace tensord::server {
namespace {

TEST(ByteSizeTest, ParsesUnits) {
  EXPECT_EQ(*ParseByteSize("1024"), 1024u);
  EXPECT_EQ(*ParseByteSize("1KiB"), 1024u);
  EXPECT_EQ(*ParseByteSize("512MiB"), 512u << 20);
  EXPECT_EQ(*ParseByteSize("8GiB"), uint64_t{8} << 30);
  EXPECT_EQ(*ParseByteSize("1.5GB"), 1500000000u);
  EXPECT_EQ(*ParseByteSize(" 2 gib "), uint64_t{2} << 30);
}

TEST(ByteSizeTest, RejectsGarbage) {
  for (const char* bad : {"", "GiB", "-1", "12XB", "1e400", "99999999999TiB"}) {
    auto r = ParseByteSize(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("invalid byte size"),
              absl::string_view::npos);
  }
}

}  // namespace
}  // namespace tensord::server
