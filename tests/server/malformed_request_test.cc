// Malformed requests through a raw (generic) client, on a real server: every
// unary RPC of tensord.v1.TensorService answers each kind of malformed bytes
// with INVALID_ARGUMENT and a message naming the request type and the
// problem (DESIGN.md's status table), never gRPC's own UNIMPLEMENTED with
// an empty message.
#include <gmock/gmock.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/dynamic_message.h"
#include "server/grpc_service.h"
#include "server/server.h"
#include "tensord/v1/tensord.grpc.pb.h"

namespace tensord::server {
namespace {

namespace pb = ::google::protobuf;
using ::testing::HasSubstr;

// RPCs declared in tensord.proto that the service does not serve yet (a
// well-formed request answers UNIMPLEMENTED). Remove a name once it is
// served: from then on it must pass every check below, which it does only
// as a raw method (server/grpc_service.h, TensorServiceBase).
const std::set<std::string> kNotYetServed = {};

const pb::ServiceDescriptor* Service() {
  return pb::DescriptorPool::generated_pool()->FindServiceByName(
      v1::TensorService::service_full_name());
}

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

std::string Len(uint32_t field, const std::string& body) {
  return Tag(field, 2) + Varint(body.size()) + body;
}

struct Reply {
  grpc::Status status;
  std::vector<std::string> messages;
  std::string instance;  // trailing metadata tensord-instance
};

class MalformedRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    StartServer(std::move(options));
  }

  void StartServer(ServerOptions options) {
    auto server = Server::Start(std::move(options));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    channel_ = grpc::CreateChannel(server_->address(),
                                   grpc::InsecureChannelCredentials());
    generic_ = std::make_unique<grpc::GenericStub>(channel_);
  }

  // One call of `method` carrying `message` (none: the client half-closes
  // without sending one) as raw bytes; every reply message is read.
  Reply Call(const std::string& method,
             const std::optional<std::string>& message,
             const std::string& service = "tensord.v1.TensorService") {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(20));
    grpc::CompletionQueue cq;
    auto call =
        generic_->PrepareCall(&ctx, "/" + service + "/" + method, &cq);
    void* tag = reinterpret_cast<void*>(1);
    auto wait = [&cq] {
      void* got = nullptr;
      bool ok = false;
      return cq.Next(&got, &ok) && ok;
    };
    Reply reply;
    call->StartCall(tag);
    if (wait()) {
      bool open = true;
      if (message.has_value()) {
        grpc::Slice slice(*message);
        grpc::ByteBuffer buffer(&slice, 1);
        call->Write(buffer, tag);
        open = wait();
      }
      if (open) {
        call->WritesDone(tag);
        wait();
      }
      for (;;) {
        grpc::ByteBuffer buffer;
        call->Read(&buffer, tag);
        if (!wait()) break;
        grpc::Slice flat;
        EXPECT_TRUE(buffer.DumpToSingleSlice(&flat).ok());
        reply.messages.emplace_back(reinterpret_cast<const char*>(flat.begin()),
                                    flat.size());
      }
    }
    call->Finish(&reply.status, tag);
    wait();
    cq.Shutdown();
    void* got;
    bool ok;
    while (cq.Next(&got, &ok)) {
    }
    const auto& trailers = ctx.GetServerTrailingMetadata();
    auto it = trailers.find(kInstanceMetadataKey);
    if (it != trailers.end()) {
      reply.instance.assign(it->second.data(), it->second.size());
    }
    return reply;
  }

  // The unary methods of the service, as declared in tensord.proto.
  static std::vector<const pb::MethodDescriptor*> UnaryMethods() {
    const pb::ServiceDescriptor* service = Service();
    std::vector<const pb::MethodDescriptor*> out;
    for (int i = 0; i < service->method_count(); ++i) {
      const pb::MethodDescriptor* m = service->method(i);
      if (!m->client_streaming() && !m->server_streaming()) out.push_back(m);
    }
    return out;
  }

  std::unique_ptr<Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::GenericStub> generic_;
};

// "field 1 (session)", or "field 1 (unknown)" for a type without field 1.
std::string FieldName(const pb::Descriptor& type, int number) {
  const pb::FieldDescriptor* f = type.FindFieldByNumber(number);
  return "field " + std::to_string(number) + " (" +
         (f == nullptr ? std::string("unknown") : f->name()) + ")";
}

// The type's first `string` field, if any.
const pb::FieldDescriptor* FirstStringField(const pb::Descriptor& type) {
  for (int i = 0; i < type.field_count(); ++i) {
    const pb::FieldDescriptor* f = type.field(i);
    if (f->type() == pb::FieldDescriptor::TYPE_STRING && !f->is_repeated()) {
      return f;
    }
  }
  return nullptr;
}

struct Malformed {
  std::string kind;
  std::optional<std::string> bytes;  // none: no request message at all
  std::string problem;  // the message after "<type> is malformed: "
};

// Each kind of malformed bytes, as a request of `type`, with what the
// server must say about it.
std::vector<Malformed> MalformedKinds(const pb::Descriptor& type) {
  const std::string unknown = "field 1000 (unknown)";
  const std::string f1 = FieldName(type, 1);
  std::vector<Malformed> kinds = {
      {"a length running past the end", Tag(1, 2) + Varint(100) + "abc",
       f1 + ": length 100 runs past the end of the message (3 bytes left)"},
      {"wire type 7", Tag(1000, 0) + "\x01" + Tag(1, 7) + "abc",
       f1 + ": invalid wire type 7 at byte 3"},
      {"wire type 6", Tag(1000, 6),
       unknown + ": invalid wire type 6 at byte 0"},
      {"a truncated varint", Tag(1000, 0) + "\xff\xff",
       unknown + ": truncated varint at byte 2"},
      {"a truncated fixed64", Tag(1000, 1) + "\x01\x02\x03",
       unknown + ": truncated fixed64 at byte 2 (8 bytes needed, 3 left)"},
      {"a truncated tag", Len(1000, "ok") + "\x80", "truncated tag at byte 5"},
      {"a stray end-group tag", Tag(1000, 4),
       "end-group tag of field 1000 at byte 0 without a start-group tag"},
      {"an unclosed group", Tag(1000, 3) + Tag(1, 5) + "abcd",
       unknown + ": group not closed: the message ends at byte 7 before its "
                 "end-group tag"},
      {"field number 0", Tag(0, 1) + "12345678", "field number 0 at byte 0"},
  };
  if (const pb::FieldDescriptor* s = FirstStringField(type)) {
    const std::string name = FieldName(type, s->number());
    // A well-formed request with the string set, cut short by one byte.
    pb::DynamicMessageFactory factory;
    std::unique_ptr<pb::Message> m(factory.GetPrototype(&type)->New());
    m->GetReflection()->SetString(m.get(), s, "hello");
    std::string whole = m->SerializeAsString();
    whole.pop_back();
    kinds.push_back({"a truncated message", whole,
                     name + ": length 5 runs past the end of the message (4 "
                            "bytes left)"});
    kinds.push_back({"invalid UTF-8 in a string field",
                     Len(s->number(),
                         "a\xff"
                         "b"),
                     name + ": not valid UTF-8 (a string field): byte 0xff at "
                            "offset 1 of 3"});
  }
  return kinds;
}

TEST_F(MalformedRequestTest, EveryUnaryRpcAnswersEachKindWithInvalidArgument) {
  const std::vector<const pb::MethodDescriptor*> methods = UnaryMethods();
  ASSERT_GE(methods.size(), 21u);
  int checked = 0, with_strings = 0;
  for (const pb::MethodDescriptor* method : methods) {
    if (kNotYetServed.count(method->name()) > 0) continue;
    const pb::Descriptor& type = *method->input_type();
    const std::vector<Malformed> kinds = MalformedKinds(type);
    with_strings += kinds.size() > 9;
    for (const Malformed& bad : kinds) {
      SCOPED_TRACE(method->name() + ": " + bad.kind);
      const Reply reply = Call(method->name(), bad.bytes);
      EXPECT_EQ(reply.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
          << reply.status.error_message();
      EXPECT_EQ(reply.status.error_message(),
                type.full_name() + " is malformed: " + bad.problem);
      EXPECT_TRUE(reply.messages.empty());
      EXPECT_EQ(reply.instance, server_->instance_id());
      ++checked;
    }
    // A call that carries no request message at all.
    SCOPED_TRACE(method->name() + ": no message");
    const Reply none = Call(method->name(), std::nullopt);
    EXPECT_EQ(none.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(none.status.error_message(),
              "the call carries no " + type.full_name() +
                  " (a unary RPC takes exactly one request message)");
    EXPECT_EQ(none.instance, server_->instance_id());
  }
  EXPECT_GE(checked, 21 * 9);
  EXPECT_GE(with_strings, 15);  // all but the empty requests
}

// NodeService (moves between nodes) parses its own requests too: gRPC's
// parse would answer UNIMPLEMENTED with no message, before the node's
// token is even looked at (found by the fuzzer).
TEST_F(MalformedRequestTest, NodeServiceAnswersMalformedBytesToo) {
  const std::string tokens = ::testing::TempDir() + "malformed-node-tokens";
  std::ofstream(tokens) << "node-a token-a-0123456789\n";
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.runtime.node_name = "node-a";
  options.node_token_file = tokens;
  StartServer(std::move(options));
  const pb::Descriptor& type = *v1::PullChunkRequest::descriptor();
  int checked = 0;
  for (const Malformed& bad : MalformedKinds(type)) {
    SCOPED_TRACE("PullChunk: " + bad.kind);
    const Reply reply = Call("PullChunk", bad.bytes, "tensord.v1.NodeService");
    EXPECT_EQ(reply.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << reply.status.error_message();
    EXPECT_EQ(reply.status.error_message(),
              type.full_name() + " is malformed: " + bad.problem);
    ++checked;
  }
  EXPECT_GE(checked, 9);
}

TEST_F(MalformedRequestTest, NestedProblemsNameTheirPath) {
  struct Case {
    std::string method;
    std::string bytes;
    std::string message;
  };
  const std::string session = Len(1, "s");
  for (const Case& c : std::vector<Case>{
           {"Create", session + Len(6, Tag(1, 0) + "\x80"),
            "tensord.v1.CreateRequest is malformed: field 6 (fill) > field 1 "
            "(kind): truncated varint at byte 6"},
           {"Create", session + Len(6, Tag(2, 1) + "\x01\x02"),
            "tensord.v1.CreateRequest is malformed: field 6 (fill) > field 2 "
            "(value): truncated fixed64 at byte 6 (8 bytes needed, 2 left)"},
           {"Run", session + Len(2, Len(1, Len(2, Tag(1, 0) + "\xff"))),
            "tensord.v1.RunRequest is malformed: field 2 (op) > field 1 "
            "(binary) > field 2 (lhs) > field 1 (handle): truncated varint at "
            "byte 10"},
           {"Execute", session + Len(2, "") + Len(2, Len(11, Tag(1, 7))),
            "tensord.v1.ExecuteRequest is malformed: field 2 (ops) > field 11 "
            "(cat) > field 1 (xs): invalid wire type 7 at byte 9"},
           {"Run", session + Len(2, Tag(5, 2) + Varint(9) + "x"),
            "tensord.v1.RunRequest is malformed: field 2 (op) > field 5 "
            "(reduce): length 9 runs past the end of the message (1 byte "
            "left)"},
       }) {
    SCOPED_TRACE(c.method);
    const Reply reply = Call(c.method, c.bytes);
    EXPECT_EQ(reply.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(reply.status.error_message(), c.message);
  }
}

TEST_F(MalformedRequestTest, WellFormedRawRequestsAreServed) {
  // The empty message is a valid ListDevicesRequest.
  Reply listed = Call("ListDevices", std::string());
  ASSERT_TRUE(listed.status.ok()) << listed.status.error_message();
  ASSERT_EQ(listed.messages.size(), 1u);
  v1::ListDevicesResponse devices;
  ASSERT_TRUE(devices.ParseFromString(listed.messages[0]));
  EXPECT_FALSE(devices.server_version().empty());
  EXPECT_GE(devices.devices_size(), 1);
  EXPECT_EQ(listed.instance, server_->instance_id());

  // Unknown fields, and known ones with another wire type, are not errors.
  v1::OpenSessionRequest open;
  open.set_client_name("raw");
  Reply opened = Call("OpenSession", open.SerializeAsString() + Tag(1000, 0) +
                                         "\x01" + Tag(2, 5) + "abcd");
  ASSERT_TRUE(opened.status.ok()) << opened.status.error_message();
  v1::OpenSessionResponse session;
  ASSERT_EQ(opened.messages.size(), 1u);
  ASSERT_TRUE(session.ParseFromString(opened.messages[0]));
  EXPECT_FALSE(session.session().empty());

  // `bytes` fields are not UTF-8 checked: a Create whose data is not text.
  v1::CreateRequest create;
  create.set_session(session.session());
  create.set_dtype(v1::INT32);
  create.add_shape(1);
  create.set_data(std::string("\xff\xfe\xc0\x80", 4));
  Reply created = Call("Create", create.SerializeAsString());
  ASSERT_TRUE(created.status.ok()) << created.status.error_message();
  v1::TensorResponse tensor;
  ASSERT_EQ(created.messages.size(), 1u);
  ASSERT_TRUE(tensor.ParseFromString(created.messages[0]));
  EXPECT_EQ(tensor.tensor().nbytes(), 4u);

  // A well-formed request still gets the service's own checks.
  create.set_dtype(v1::DTYPE_UNSPECIFIED);
  Reply rejected = Call("Create", create.SerializeAsString());
  EXPECT_EQ(rejected.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(rejected.status.error_message(),
              ::testing::Not(HasSubstr("is malformed")));
}

TEST_F(MalformedRequestTest, StreamingRpcsNameTheProblemToo) {
  const Reply fetched = Call("Fetch", Len(1, "s") + Tag(2, 0) + "\x80");
  EXPECT_EQ(fetched.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(fetched.status.error_message(),
            "tensord.v1.FetchRequest is malformed: field 2 (handle): "
            "truncated varint at byte 4");
  const Reply uploaded = Call("Upload", Tag(1, 7));
  EXPECT_EQ(uploaded.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(uploaded.status.error_message(),
            "Upload message #1 is not a tensord.v1.UploadRequest: field 1 "
            "(header): invalid wire type 7 at byte 0");
}

TEST_F(MalformedRequestTest, NotYetServedRpcsAreStillListed) {
  // Keeps kNotYetServed honest: an RPC in it must really be unserved.
  for (const std::string& name : kNotYetServed) {
    ASSERT_NE(Service()->FindMethodByName(name), nullptr)
        << name << " is not in tensord.proto: remove it from kNotYetServed";
    const Reply reply = Call(name, std::string());
    EXPECT_EQ(reply.status.error_code(), grpc::StatusCode::UNIMPLEMENTED)
        << name << " is served now: remove it from kNotYetServed, so that "
        << "its malformed requests are checked";
  }
}

TEST_F(MalformedRequestTest, CredentialsComeBeforeTheRequestIsRead) {
  const std::string tokens = ::testing::TempDir() + "/malformed_tokens";
  std::ofstream(tokens) << "secret-token\n";
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.auth_token_file = tokens;
  StartServer(std::move(options));
  const Reply reply = Call("Create", Tag(1, 7));
  EXPECT_EQ(reply.status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
      << reply.status.error_message();
  EXPECT_THAT(reply.status.error_message(),
              ::testing::Not(HasSubstr("malformed")));
}

}  // namespace
}  // namespace tensord::server
