// proto/wire/bulk: messages read and written in place must be byte-for-byte
// what protobuf writes and accepts, however gRPC happens to slice them.
#include "proto/wire/bulk.h"

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tensord/v1/tensord.pb.h"

namespace tensord::wire {
namespace {

namespace v1 = ::tensord::v1;

// `bytes` cut into slices of `piece` bytes (the last one shorter).
grpc::ByteBuffer Sliced(const std::string& bytes, size_t piece) {
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < bytes.size(); at += piece) {
    slices.emplace_back(bytes.substr(at, piece));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 131 + 7);
  return s;
}

v1::UploadRequest FirstUpload(const std::string& data) {
  v1::UploadRequest m;
  m.mutable_header()->set_session("s-123");
  m.mutable_header()->set_device("cpu");
  m.mutable_header()->set_dtype(v1::FLOAT32);
  m.mutable_header()->add_shape(static_cast<int64_t>(data.size() / 4));
  m.set_data(data);
  return m;
}

TEST(BulkWireTest, ScansAndStreamsAProtobufMessageHoweverItIsSliced) {
  const std::string data = Pattern(100003);
  const std::string bytes = FirstUpload(data).SerializeAsString();
  // One slice, slices that split the tag, the length varint and the data.
  for (size_t piece : {bytes.size(), size_t{1}, size_t{3}, size_t{7},
                       size_t{4096}, size_t{65536}}) {
    SCOPED_TRACE(piece);
    grpc::ByteBuffer buffer = Sliced(bytes, piece);
    v1::UploadRequest rest;
    BulkField bulk;
    std::string error;
    ASSERT_TRUE(ScanBulkMessage(&buffer, 2, &rest, &bulk, &error)) << error;
    EXPECT_EQ(bulk.count, 1);
    EXPECT_EQ(bulk.bytes, data.size());
    EXPECT_TRUE(rest.data().empty());
    EXPECT_EQ(rest.header().session(), "s-123");
    EXPECT_EQ(rest.header().shape(0), static_cast<int64_t>(data.size() / 4));
    std::string streamed;
    int pieces = 0;
    ASSERT_TRUE(ForEachBulkPiece(
        &buffer, 2,
        [&](const uint8_t* p, size_t n) {
          streamed.append(reinterpret_cast<const char*>(p), n);
          ++pieces;
          return true;
        },
        &error))
        << error;
    EXPECT_EQ(streamed, data);
    if (piece == 4096) {
      EXPECT_GT(pieces, 1);  // pieces as they lie
    }
  }
}

TEST(BulkWireTest, FieldsInAnyOrderAndUnknownFieldsAreAccepted) {
  v1::UploadRequest header_only = FirstUpload("");
  header_only.clear_data();
  v1::UploadRequest data_only;
  data_only.set_data("abcdefgh");
  // Data first, then the header, then an unknown varint field 99 = 5.
  const std::string bytes = data_only.SerializeAsString() +
                            header_only.SerializeAsString() +
                            std::string("\x98\x06\x05", 3);
  grpc::ByteBuffer buffer = Sliced(bytes, 5);
  v1::UploadRequest rest;
  BulkField bulk;
  std::string error;
  ASSERT_TRUE(ScanBulkMessage(&buffer, 2, &rest, &bulk, &error)) << error;
  EXPECT_TRUE(rest.has_header());
  EXPECT_EQ(bulk.count, 1);
  std::string streamed;
  ASSERT_TRUE(ForEachBulkPiece(&buffer, 2,
                               [&](const uint8_t* p, size_t n) {
                                 streamed.append(reinterpret_cast<const char*>(p), n);
                                 return true;
                               },
                               &error));
  EXPECT_EQ(streamed, "abcdefgh");
}

TEST(BulkWireTest, CountsARepeatedBulkField) {
  v1::UploadRequest a, b;
  a.set_data("one");
  b.set_data("second");
  grpc::ByteBuffer buffer =
      Sliced(a.SerializeAsString() + b.SerializeAsString(), 4);
  v1::UploadRequest rest;
  BulkField bulk;
  std::string error;
  ASSERT_TRUE(ScanBulkMessage(&buffer, 2, &rest, &bulk, &error));
  EXPECT_EQ(bulk.count, 2);
  EXPECT_EQ(bulk.bytes, 6u);  // the last one, as protobuf would keep
}

TEST(BulkWireTest, EmptyMessageIsTheDefault) {
  grpc::ByteBuffer none;
  v1::UploadRequest rest;
  rest.set_data("stale");
  BulkField bulk;
  std::string error;
  ASSERT_TRUE(ScanBulkMessage(&none, 2, &rest, &bulk, &error));
  EXPECT_EQ(bulk.count, 0);
  EXPECT_FALSE(rest.has_header());
  EXPECT_TRUE(ForEachBulkPiece(&none, 2, [](const uint8_t*, size_t) { return false; },
                               &error));
}

TEST(BulkWireTest, MalformedMessagesAreRefusedWithAReason) {
  const std::string good = FirstUpload(Pattern(64)).SerializeAsString();
  const std::vector<std::string> bad = {
      good.substr(0, good.size() - 1),       // data cut short
      std::string("\x12\x80", 2),            // length varint cut short
      std::string("\x0a\x02\x08", 3),        // header cut short
      std::string("\x0a\x03\xff\xff\xff", 5),  // header is not a Header
      std::string("\x0c", 1),                // end-group tag at top level
      std::string("\x00", 1),                // field number 0
  };
  for (const std::string& bytes : bad) {
    SCOPED_TRACE(testing::PrintToString(bytes.size()));
    grpc::ByteBuffer buffer = Sliced(bytes, 2);
    v1::UploadRequest rest;
    BulkField bulk;
    std::string error;
    std::string streamed_error;
    const bool scanned = ScanBulkMessage(&buffer, 2, &rest, &bulk, &error);
    const bool streamed = ForEachBulkPiece(
        &buffer, 2, [](const uint8_t*, size_t) { return true; },
        &streamed_error);
    EXPECT_FALSE(scanned && streamed);
    if (!scanned) {
      EXPECT_FALSE(error.empty());
    }
  }
}

TEST(BulkWireTest, SinkCanStopTheWalk) {
  grpc::ByteBuffer buffer = Sliced(FirstUpload(Pattern(1000)).SerializeAsString(), 100);
  std::string error;
  int calls = 0;
  EXPECT_FALSE(ForEachBulkPiece(&buffer, 2,
                                [&](const uint8_t*, size_t) {
                                  ++calls;
                                  return false;
                                },
                                &error));
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(error.empty());
}

TEST(BulkWireTest, BuilderWritesWhatProtobufParses) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{127}, size_t{128},
                   size_t{1} << 20}) {
    SCOPED_TRACE(n);
    const std::string data = Pattern(n);
    v1::FetchChunk head;
    head.mutable_tensor()->set_handle(42);
    head.mutable_tensor()->set_nbytes(n);
    head.set_offset(1ull << 40);
    BulkMessageBuilder builder(head, v1::FetchChunk::kDataFieldNumber, n);
    if (n > 0) std::memcpy(builder.data(), data.data(), n);
    v1::FetchChunk tail;
    tail.set_crc32(0xfedcba98u);
    grpc::ByteBuffer message = builder.Finish(tail);
    v1::FetchChunk parsed;
    ASSERT_TRUE(parsed.ParseFromString(Flatten(message)));
    EXPECT_EQ(parsed.tensor().handle(), 42u);
    EXPECT_EQ(parsed.offset(), 1ull << 40);
    EXPECT_EQ(parsed.data(), data);
    EXPECT_EQ(parsed.crc32(), 0xfedcba98u);
    // And exactly the bytes protobuf writes for the same message (but for
    // an empty `data`, which the builder writes out and proto3 omits).
    if (n == 0) continue;
    v1::FetchChunk whole = head;
    whole.set_data(data);
    whole.set_crc32(0xfedcba98u);
    EXPECT_EQ(Flatten(message), whole.SerializeAsString());
  }
}

TEST(BulkWireTest, BuilderTakesATailLargerThanItsRoom) {
  v1::UploadRequest head;
  BulkMessageBuilder builder(head, v1::UploadRequest::kDataFieldNumber, 3);
  std::memcpy(builder.data(), "xyz", 3);
  v1::UploadRequest tail;
  tail.mutable_header()->set_session(std::string(200, 's'));
  v1::UploadRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(Flatten(builder.Finish(tail))));
  EXPECT_EQ(parsed.data(), "xyz");
  EXPECT_EQ(parsed.header().session(), std::string(200, 's'));
}

}  // namespace
}  // namespace tensord::wire
