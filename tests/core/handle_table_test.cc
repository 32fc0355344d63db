#include "core/runtime/handle_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

namespace tensord::core {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<const StoredTensor> Tensor(uint64_t nbytes) {
  auto t = NewStoredTensor();
  t->nbytes = nbytes;
  return t;
}

TEST(HandleTableTest, SessionIdsAreLongRandomHex) {
  HandleTable table;
  std::set<std::string> ids;
  for (int i = 0; i < 100; ++i) {
    std::string id = table.OpenSession("client");
    EXPECT_EQ(id.size(), 32u);
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos);
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 100u);
  EXPECT_EQ(table.session_count(), 100u);
}

TEST(HandleTableTest, InsertLookupRemove) {
  HandleTable table;
  const std::string s = table.OpenSession("c");
  auto e = table.Insert(s, Tensor(12), "weights").value();
  EXPECT_NE(e.handle, 0u);
  auto got = table.Lookup(s, e.handle).value();
  EXPECT_EQ(got.tag, "weights");
  EXPECT_EQ(got.tensor->nbytes, 12u);
  EXPECT_GE(got.last_used, e.last_used);
  auto e2 = table.Insert(s, Tensor(4), "").value();
  EXPECT_NE(e2.handle, e.handle);
  auto list = table.List(s).value();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_LT(list[0].handle, list[1].handle);
  EXPECT_TRUE(table.Remove(s, e.handle).ok());
  auto gone = table.Lookup(s, e.handle);
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(
      gone.status().message(),
      absl::StrCat("unknown tensor handle ", e.handle, " in this session"));
}

TEST(HandleTableTest, ForeignHandleIsNotFound) {
  HandleTable table;
  const std::string alice = table.OpenSession("alice");
  const std::string bob = table.OpenSession("bob");
  auto e = table.Insert(alice, Tensor(8), "secret").value();
  auto stolen = table.Lookup(bob, e.handle);
  EXPECT_EQ(stolen.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(stolen.status().message()),
              HasSubstr("unknown tensor handle"));
  EXPECT_EQ(table.Remove(bob, e.handle).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(table.Lookup(alice, e.handle).ok());
}

TEST(HandleTableTest, UnknownSession) {
  HandleTable table;
  auto r = table.Lookup("abc", 1);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "unknown session 'abc'");
  EXPECT_EQ(table.Insert("abc", Tensor(1), "").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(table.CloseSession("abc").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(table.CheckSession("abc").code(), absl::StatusCode::kNotFound);
  // Long ids are echoed only in part.
  auto long_id = table.Lookup(std::string(1000, 'x'), 1);
  EXPECT_LT(long_id.status().message().size(), 100u);
}

TEST(HandleTableTest, CloseSessionReturnsEntries) {
  HandleTable table;
  const std::string s = table.OpenSession("c");
  uint64_t h = table.Insert(s, Tensor(1), "").value().handle;
  table.Insert(s, Tensor(2), "").value();
  auto closed = table.CloseSession(s).value();
  EXPECT_EQ(closed.size(), 2u);
  EXPECT_EQ(table.session_count(), 0u);
  EXPECT_EQ(table.Lookup(s, h).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table.CloseSession(s).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tensord::core
