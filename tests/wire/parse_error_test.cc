// proto/wire/parse_error: the diagnosis of bytes protobuf refuses names the
// problem and where it lies, and finds a problem exactly when protobuf's
// parser fails (checked on every malformed kind, and on many thousands of
// mutated messages).
#include "proto/wire/parse_error.h"

#include <gmock/gmock.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tensord/v1/tensord.pb.h"

namespace tensord::wire {
namespace {

namespace pb = ::google::protobuf;
namespace v1 = ::tensord::v1;
using ::testing::HasSubstr;

std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}

std::string Tag(uint32_t field, int wire) { return Varint(field << 3 | wire); }

// A length-delimited field.
std::string Len(uint32_t field, const std::string& body) {
  return Tag(field, 2) + Varint(body.size()) + body;
}

// What protobuf says, and what the diagnosis says, must agree.
bool Parses(const pb::Message& prototype, const std::string& bytes) {
  pb::LogSilencer quiet;  // invalid UTF-8 logs an error per parse
  std::unique_ptr<pb::Message> m(prototype.New());
  return m->ParseFromString(bytes);
}

std::string Describe(const pb::Message& prototype, const std::string& bytes) {
  EXPECT_FALSE(Parses(prototype, bytes)) << "the test bytes parse";
  EXPECT_TRUE(FindParseError(*prototype.GetDescriptor(), bytes).has_value());
  return DescribeParseError(*prototype.GetDescriptor(), bytes);
}

const std::string kSession = Len(1, "abc");  // 5 bytes: field 1, "abc"

TEST(ParseErrorTest, LengthPastTheEnd) {
  EXPECT_EQ(Describe(v1::CreateRequest(),
                     kSession + Tag(2, 2) + Varint(100) + std::string(12, 'x')),
            "tensord.v1.CreateRequest is malformed: field 2 (device): length "
            "100 runs past the end of the message (12 bytes left)");
}

TEST(ParseErrorTest, InvalidWireType) {
  EXPECT_EQ(Describe(v1::CreateRequest(), kSession + Tag(2, 7) + "abc"),
            "tensord.v1.CreateRequest is malformed: field 2 (device): invalid "
            "wire type 7 at byte 5");
  EXPECT_EQ(Describe(v1::ListDevicesRequest(), Tag(3, 6)),
            "tensord.v1.ListDevicesRequest is malformed: field 3 (unknown): "
            "invalid wire type 6 at byte 0");
}

TEST(ParseErrorTest, Truncated) {
  EXPECT_EQ(Describe(v1::CreateRequest(), kSession + Tag(3, 0) + "\x80\x80"),
            "tensord.v1.CreateRequest is malformed: field 3 (dtype): "
            "truncated varint at byte 6");
  EXPECT_EQ(Describe(v1::CreateRequest(), kSession + "\x80"),
            "tensord.v1.CreateRequest is malformed: truncated tag at byte 5");
  EXPECT_EQ(Describe(v1::CreateRequest(), kSession + Tag(2, 2)),
            "tensord.v1.CreateRequest is malformed: field 2 (device): "
            "truncated length at byte 6");
  // A serialized request cut short inside a field.
  v1::ToRequest to;
  to.set_session("session-id");
  to.set_device("cuda:0");
  const std::string whole = to.SerializeAsString();
  EXPECT_EQ(Describe(v1::ToRequest(), whole.substr(0, whole.size() - 2)),
            "tensord.v1.ToRequest is malformed: field 3 (device): length 6 "
            "runs past the end of the message (4 bytes left)");
  EXPECT_EQ(Describe(v1::CreateRequest(), Len(6, Tag(2, 1) + "\x01\x02\x03")),
            "tensord.v1.CreateRequest is malformed: field 6 (fill) > field 2 "
            "(value): truncated fixed64 at byte 3 (8 bytes needed, 3 left)");
  EXPECT_EQ(Describe(v1::ListDevicesRequest(), Tag(1, 5) + "\x01"),
            "tensord.v1.ListDevicesRequest is malformed: field 1 (unknown): "
            "truncated fixed32 at byte 1 (4 bytes needed, 1 left)");
}

TEST(ParseErrorTest, InvalidUtf8InAStringField) {
  EXPECT_EQ(Describe(v1::CreateRequest(), Len(2,
                                              "ab\xff"
                                              "cd")),
            "tensord.v1.CreateRequest is malformed: field 2 (device): not "
            "valid UTF-8 (a string field): byte 0xff at offset 2 of 5");
  // In a nested message, and in a repeated-message element.
  v1::ExecuteRequest execute;
  execute.add_ops()->mutable_cast()->mutable_x()->set_handle(1);
  const std::string op0 = execute.ops(0).SerializeAsString();
  EXPECT_EQ(
      Describe(v1::ListAllTensorsResponse(), Len(1, Len(1, "\xed\xa0\x80"))),
      "tensord.v1.ListAllTensorsResponse is malformed: field 1 "
      "(tensors) > field 1 (session_id_prefix): not valid UTF-8 (a "
      "string field): byte 0xed at offset 0 of 3");
  EXPECT_EQ(Describe(v1::ExecuteRequest(),
                     Len(2, op0) + Len(2, op0) + Len(1, "\xc0\x80")),
            "tensord.v1.ExecuteRequest is malformed: field 1 (session): not "
            "valid UTF-8 (a string field): byte 0xc0 at offset 0 of 2");
}

TEST(ParseErrorTest, BytesFieldsAreNotUtf8Checked) {
  const std::string bytes = Len(5, "\xff\xfe\xc0\x80");  // CreateRequest.data
  EXPECT_TRUE(Parses(v1::CreateRequest(), bytes));
  EXPECT_EQ(FindParseError(*v1::CreateRequest::descriptor(), bytes),
            std::nullopt);
}

TEST(ParseErrorTest, NestedPaths) {
  // RunRequest.op > Op.binary > BinaryArgs.lhs > Operand.handle.
  const std::string lhs = Tag(1, 0) + "\x80\x80";
  EXPECT_EQ(
      Describe(v1::RunRequest(),
               kSession + Len(2, Len(1, Tag(1, 0) + "\x01" + Len(2, lhs)))),
      "tensord.v1.RunRequest is malformed: field 2 (op) > field 1 "
      "(binary) > field 2 (lhs) > field 1 (handle): truncated varint at "
      "byte 14");
  EXPECT_EQ(Describe(v1::CreateRequest(), Len(6, Tag(1, 0) + "\xff")),
            "tensord.v1.CreateRequest is malformed: field 6 (fill) > field 1 "
            "(kind): truncated varint at byte 3");
  // A nested length may not run past its own message's end.
  EXPECT_EQ(Describe(v1::RunRequest(),
                     Len(2, Tag(1, 2) + Varint(5) + "ab") + kSession),
            "tensord.v1.RunRequest is malformed: field 2 (op) > field 1 "
            "(binary): length 5 runs past the end of the message (2 bytes "
            "left)");
}

TEST(ParseErrorTest, KnownFieldWithAnotherWireTypeIsUnknownNotAnError) {
  // fill (a message) as a varint, device (a string) as a fixed32: protobuf
  // keeps both as unknown fields.
  const std::string bytes = Tag(6, 0) + "\x05" + Tag(2, 5) + "abcd";
  EXPECT_TRUE(Parses(v1::CreateRequest(), bytes));
  EXPECT_EQ(FindParseError(*v1::CreateRequest::descriptor(), bytes),
            std::nullopt);
  // ...but an unknown field must still be well-formed.
  EXPECT_EQ(Describe(v1::CreateRequest(), Tag(6, 0) + "\x85"),
            "tensord.v1.CreateRequest is malformed: field 6 (fill): truncated "
            "varint at byte 1");
}

TEST(ParseErrorTest, PackedAndUnpackedRepeated) {
  const std::string unpacked = Tag(4, 0) + "\x02" + Tag(4, 0) + "\x03";
  const std::string packed = Len(4, "\x02\x03");
  EXPECT_EQ(FindParseError(*v1::CreateRequest::descriptor(), unpacked),
            std::nullopt);
  EXPECT_EQ(FindParseError(*v1::CreateRequest::descriptor(), packed),
            std::nullopt);
  EXPECT_EQ(Describe(v1::CreateRequest(), Len(4, "\x02\x83")),
            "tensord.v1.CreateRequest is malformed: field 4 (shape): "
            "truncated varint at byte 3");
}

TEST(ParseErrorTest, TagsAndLengths) {
  EXPECT_EQ(Describe(v1::CreateRequest(), std::string("\x00\x01", 2)),
            "tensord.v1.CreateRequest is malformed: tag 0 at byte 0 (no "
            "field has number 0)");
  EXPECT_EQ(Describe(v1::CreateRequest(), kSession + Tag(0, 2) + "\x00"),
            "tensord.v1.CreateRequest is malformed: field number 0 at byte 5");
  EXPECT_EQ(Describe(v1::CreateRequest(), "\x80\x80\x80\x80\x80\x01"),
            "tensord.v1.CreateRequest is malformed: tag at byte 0 is longer "
            "than 5 bytes");
  EXPECT_EQ(Describe(v1::CreateRequest(), Tag(1, 2) + "\xff\xff\xff\xff\x0f"),
            "tensord.v1.CreateRequest is malformed: field 1 (session): "
            "length at byte 1 is not a size below 2 GiB in at most 5 bytes");
  // A small length in 6 bytes: protobuf reads lengths in at most 5.
  EXPECT_THAT(Describe(v1::CreateRequest(),
                       Tag(1, 2) + "\x81\x80\x80\x80\x80\x00" + "a"),
              HasSubstr("length at byte 1 is not a size below 2 GiB"));
  EXPECT_EQ(Describe(v1::CreateRequest(),
                     Tag(3, 0) + std::string(10, '\x80') + "\x01"),
            "tensord.v1.CreateRequest is malformed: field 3 (dtype): varint "
            "at byte 1 is longer than 10 bytes");
}

TEST(ParseErrorTest, Groups) {
  // Unknown groups parse when closed by their own end-group tag.
  const std::string group = Tag(9, 3) + Tag(1, 0) + "\x01" + Tag(9, 4);
  EXPECT_TRUE(Parses(v1::CreateRequest(), group));
  EXPECT_EQ(FindParseError(*v1::CreateRequest::descriptor(), group),
            std::nullopt);
  EXPECT_EQ(Describe(v1::CreateRequest(), Tag(9, 4)),
            "tensord.v1.CreateRequest is malformed: end-group tag of field 9 "
            "at byte 0 without a start-group tag");
  EXPECT_EQ(Describe(v1::CreateRequest(), Tag(9, 3) + Tag(8, 4)),
            "tensord.v1.CreateRequest is malformed: field 9 (unknown): "
            "end-group tag of field 8 at byte 1 inside the group of field 9");
  EXPECT_EQ(Describe(v1::CreateRequest(), Tag(9, 3) + Tag(1, 0) + "\x01"),
            "tensord.v1.CreateRequest is malformed: field 9 (unknown): group "
            "not closed: the message ends at byte 3 before its end-group tag");
  // An end-group tag inside a nested message ends nothing.
  EXPECT_EQ(Describe(v1::CreateRequest(), Len(6, Tag(6, 4))),
            "tensord.v1.CreateRequest is malformed: field 6 (fill): end-group "
            "tag of field 6 at byte 2 without a start-group tag");
}

TEST(ParseErrorTest, NestingDepthIsProtobufsRecursionLimit) {
  auto nested = [](int levels) {
    std::string s;
    for (int i = 0; i < levels; ++i) s += Tag(9, 3);
    for (int i = 0; i < levels; ++i) s += Tag(9, 4);
    return s;
  };
  EXPECT_TRUE(Parses(v1::ListDevicesRequest(), nested(100)));
  EXPECT_EQ(FindParseError(*v1::ListDevicesRequest::descriptor(), nested(100)),
            std::nullopt);
  EXPECT_EQ(Describe(v1::ListDevicesRequest(), nested(101)),
            "tensord.v1.ListDevicesRequest is malformed: field 9 (unknown) > "
            "field 9 (unknown) > field 9 (unknown) > (95 more) > field 9 "
            "(unknown) > field 9 (unknown) > field 9 (unknown): messages and "
            "groups nested more than 100 deep (at byte 101)");
}

TEST(ParseErrorTest, FallbackWhenTheWalkFindsNothing) {
  EXPECT_EQ(DescribeParseError(*v1::CreateRequest::descriptor(), kSession),
            "tensord.v1.CreateRequest is malformed (protobuf could not parse 5 "
            "bytes)");
}

TEST(Utf8Test, WellFormedAndIllFormed) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8(std::string("a\0b", 3)));
  EXPECT_TRUE(IsValidUtf8("\xc2\x80 \xdf\xbf"));  // 2 bytes
  EXPECT_TRUE(IsValidUtf8("\xe0\xa0\x80 \xed\x9f\xbf \xee\x80\x80"));
  EXPECT_TRUE(IsValidUtf8("\xf0\x90\x80\x80 \xf4\x8f\xbf\xbf"));  // U+10FFFF
  EXPECT_TRUE(IsValidUtf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  struct Bad {
    std::string s;
    size_t at;
  };
  for (const Bad& bad : std::vector<Bad>{
           {"ab\x80", 2},            // lone continuation byte
           {"\xc0\x80", 0},          // overlong NUL
           {"\xc1\xbf", 0},          // overlong
           {"\xe0\x9f\xbf", 0},      // overlong 3-byte
           {"\xf0\x8f\xbf\xbf", 0},  // overlong 4-byte
           {"x\xed\xa0\x80", 1},     // surrogate U+D800
           {"\xed\xbf\xbf", 0},      // surrogate U+DFFF
           {"\xf4\x90\x80\x80", 0},  // U+110000
           {"\xf5\x80\x80\x80", 0},  // past U+10FFFF
           {"\xff", 0},
           {"ok\xe2\x82", 2},            // truncated sequence
           {"\xe2\x28\xa1", 0},          // bad continuation
           {"\xc3\xa9\xf0\x9f\x98", 2},  // truncated 4-byte
       }) {
    size_t at = 99;
    EXPECT_FALSE(IsValidUtf8(bad.s, &at)) << testing::PrintToString(bad.s);
    EXPECT_EQ(at, bad.at) << testing::PrintToString(bad.s);
  }
  // Every 1- and 2-byte string, against the definition by code points.
  for (int a = 0; a < 256; ++a) {
    const std::string one(1, static_cast<char>(a));
    EXPECT_EQ(IsValidUtf8(one), a < 0x80) << a;
    for (int b = 0; b < 256; ++b) {
      const std::string two = one + static_cast<char>(b);
      const bool expected = (a < 0x80 && b < 0x80) ||
                            (a >= 0xc2 && a <= 0xdf && (b & 0xc0) == 0x80);
      EXPECT_EQ(IsValidUtf8(two), expected) << a << " " << b;
    }
  }
}

// A proto3 and a proto2 message built at run time, for what tensord.proto
// lacks: packed fixed-width fields, a proto2 string (not UTF-8 checked),
// deep nesting of a message field.
class Probe {
 public:
  Probe() {
    pb::FileDescriptorProto p3;
    EXPECT_TRUE(pb::TextFormat::ParseFromString(
        R"pb(
          name: "probe3.proto"
          package: "probe"
          syntax: "proto3"
          message_type {
            name: "Probe"
            field {
              name: "d"
              number: 1
              label: LABEL_REPEATED
              type: TYPE_DOUBLE
            }
            field {
              name: "f"
              number: 2
              label: LABEL_REPEATED
              type: TYPE_FIXED32
            }
            field {
              name: "s"
              number: 3
              label: LABEL_OPTIONAL
              type: TYPE_STRING
            }
            field {
              name: "child"
              number: 4
              label: LABEL_OPTIONAL
              type: TYPE_MESSAGE
              type_name: ".probe.Probe"
            }
            field {
              name: "v"
              number: 5
              label: LABEL_REPEATED
              type: TYPE_SINT64
            }
            field { name: "b" number: 6 label: LABEL_REPEATED type: TYPE_BOOL }
          }
        )pb",
        &p3));
    pb::FileDescriptorProto p2;
    EXPECT_TRUE(pb::TextFormat::ParseFromString(R"pb(
                                                  name: "probe2.proto"
                                                  package: "probe"
                                                  syntax: "proto2"
                                                  message_type {
                                                    name: "Legacy"
                                                    field {
                                                      name: "s"
                                                      number: 1
                                                      label: LABEL_OPTIONAL
                                                      type: TYPE_STRING
                                                    }
                                                  }
                                                )pb",
                                                &p2));
    EXPECT_NE(pool_.BuildFile(p3), nullptr);
    EXPECT_NE(pool_.BuildFile(p2), nullptr);
  }
  const pb::Message& probe() {
    return *factory_.GetPrototype(pool_.FindMessageTypeByName("probe.Probe"));
  }
  const pb::Message& legacy() {
    return *factory_.GetPrototype(pool_.FindMessageTypeByName("probe.Legacy"));
  }

 private:
  pb::DescriptorPool pool_;
  pb::DynamicMessageFactory factory_{&pool_};
};

TEST(ParseErrorTest, PackedFixedWidthAndProto2Strings) {
  Probe probe;
  EXPECT_TRUE(Parses(probe.probe(), Len(1, std::string(16, '\x01'))));
  EXPECT_EQ(Describe(probe.probe(), Len(1, std::string(12, '\x01'))),
            "probe.Probe is malformed: field 1 (d): packed field of 12 bytes "
            "is not a whole number of 8-byte elements");
  EXPECT_EQ(Describe(probe.probe(), Len(2, std::string(6, '\x01'))),
            "probe.Probe is malformed: field 2 (f): packed field of 6 bytes is "
            "not a whole number of 4-byte elements");
  EXPECT_EQ(Describe(probe.probe(), Len(3, "\xff")),
            "probe.Probe is malformed: field 3 (s): not valid UTF-8 (a string "
            "field): byte 0xff at offset 0 of 1");
  const std::string legacy = Len(1, "\xff");
  EXPECT_TRUE(Parses(probe.legacy(), legacy));
  EXPECT_EQ(FindParseError(*probe.legacy().GetDescriptor(), legacy),
            std::nullopt);
}

TEST(ParseErrorTest, MessageNestingDepth) {
  Probe probe;
  auto nested = [](int levels) {
    std::string s;
    for (int i = 0; i < levels; ++i) s = Len(4, s);
    return s;
  };
  EXPECT_TRUE(Parses(probe.probe(), nested(100)));
  EXPECT_EQ(FindParseError(*probe.probe().GetDescriptor(), nested(100)),
            std::nullopt);
  EXPECT_THAT(Describe(probe.probe(), nested(101)),
              HasSubstr("field 4 (child): messages and groups nested more "
                        "than 100 deep"));
}

// The diagnosis finds a problem exactly when protobuf fails to parse: on
// mutations of valid messages of several types, and on random bytes.
TEST(ParseErrorTest, AgreesWithProtobufOnMutatedMessages) {
  Probe probe;
  struct Seed {
    const pb::Message* prototype;
    std::string bytes;
  };
  std::vector<Seed> seeds;
  {
    v1::CreateRequest create;
    create.set_session("0123456789abcdef");
    create.set_device("cpu:1");
    create.set_dtype(v1::FLOAT32);
    create.add_shape(2);
    create.add_shape(300);
    create.set_tag("caf\xc3\xa9");
    create.mutable_fill()->set_kind(v1::Fill::RANDN);
    create.mutable_fill()->set_mean(0.5);
    create.mutable_fill()->set_seed(1ull << 40);
    seeds.push_back(
        {&v1::CreateRequest::default_instance(), create.SerializeAsString()});
    create.set_data(std::string("\x00\xff\x80\x10", 4));
    seeds.push_back(
        {&v1::CreateRequest::default_instance(), create.SerializeAsString()});
  }
  {
    v1::ExecuteRequest execute;
    execute.set_session("s");
    v1::BinaryArgs* binary = execute.add_ops()->mutable_binary();
    binary->set_op(v1::ADD);
    binary->mutable_lhs()->set_handle(7);
    binary->mutable_scalar()->set_float_value(2.5);
    v1::CatArgs* cat = execute.add_ops()->mutable_cat();
    cat->add_xs()->set_result_of(0);
    cat->add_xs()->set_handle(300000);
    cat->set_dim(-1);
    execute.add_ops()->mutable_reduce()->set_dim(-2);
    execute.add_keep(1);
    execute.add_keep(2);
    seeds.push_back(
        {&v1::ExecuteRequest::default_instance(), execute.SerializeAsString()});
  }
  {
    v1::ListAllTensorsResponse list;
    v1::ListAllTensorsResponse::Entry* e = list.add_tensors();
    e->set_session_id_prefix("deadbeef");
    e->mutable_tensor()->set_device("cuda:0");
    e->mutable_tensor()->add_shape(-1);
    e->mutable_tensor()->set_age_ms(123456789);
    seeds.push_back({&v1::ListAllTensorsResponse::default_instance(),
                     list.SerializeAsString()});
    seeds.push_back({&v1::ListDevicesRequest::default_instance(),
                     Tag(9, 3) + Len(1, "x") + Tag(9, 4) + Tag(2, 1) +
                         std::string(8, '\x7f')});
  }
  seeds.push_back({&probe.probe(),
                   Len(1, std::string(16, '\x02')) + Len(2, "abcd") +
                       Len(3, "\xe2\x82\xac") +
                       Len(4, Len(4, Len(5, "\x01\x80\x01")) + Len(6, "\x01")) +
                       Tag(1, 1) + std::string(8, '\x03')});
  seeds.push_back({&probe.legacy(), Len(1, "\xc3\xa9") + Tag(3, 5) + "abcd"});

  std::mt19937 rng(20240914);
  const std::string interesting = std::string(
      "\x00\x01\x02\x03\x04\x05\x06\x07"
      "\x0c\x0f\x7f\x80\x81\xc0\xed\xf4"
      "\xff",
      17);
  int parsed = 0, refused = 0;
  for (int i = 0; i < 200000; ++i) {
    const Seed& seed = seeds[rng() % seeds.size()];
    std::string bytes = seed.bytes;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const size_t at = bytes.empty() ? 0 : rng() % (bytes.size() + 1);
      const char c = rng() % 2 == 0 ? interesting[rng() % interesting.size()]
                                    : static_cast<char>(rng());
      switch (rng() % 5) {
        case 0:
          if (at < bytes.size()) bytes[at] = c;
          break;
        case 1:
          bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(at), c);
          break;
        case 2:
          if (at < bytes.size()) bytes.erase(at, 1);
          break;
        case 3:
          bytes.resize(at);
          break;
        default:
          if (at < bytes.size()) bytes[at] ^= static_cast<char>(1 << rng() % 8);
          break;
      }
    }
    if (i % 10 == 0) {  // random bytes
      bytes.resize(rng() % 24);
      for (char& b : bytes) b = static_cast<char>(rng());
    }
    const bool parses = Parses(*seed.prototype, bytes);
    const std::optional<std::string> error =
        FindParseError(*seed.prototype->GetDescriptor(), bytes);
    ASSERT_EQ(parses, !error.has_value())
        << seed.prototype->GetTypeName() << " " << testing::PrintToString(bytes)
        << ": " << error.value_or("");
    (parses ? parsed : refused)++;
  }
  EXPECT_GT(parsed, 5000);
  EXPECT_GT(refused, 5000);
}

}  // namespace
}  // namespace tensord::wire
