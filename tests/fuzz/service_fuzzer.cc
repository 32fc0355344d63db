// libFuzzer target: arbitrary bytes as the request of one TensorService RPC,
// sent to a real in-process tensord::server::Server.
//
// One binary serves every RPC: TENSORD_FUZZ_RPC=<method> (e.g. Create,
// Upload, Execute) picks the target. At start-up it starts a Server with no
// listening socket (two host devices, small budgets), opens a session and
// pre-creates a few tensors (several dtypes, both devices) plus one tensor in
// a second, "foreign" session. Each input (layout in fuzz_common.h) is sent
// through grpc::GenericStub, so the server parses the bytes itself; the
// structured mode points session and handle fields at the live objects so
// the fuzzer reaches the runtime, not only the NOT_FOUND checks. After each
// input the live session is put back as it was (extra tensors released,
// missing ones re-created, a closed session re-opened).
//
// Oracles: ASan/UBSan/LeakSanitizer reports; for every input, raw or
// structured, an UNIMPLEMENTED status (gRPC's answer to a request it failed
// to parse itself), an INTERNAL or UNKNOWN one (DESIGN.md: a bug) or a call
// that does not finish within its deadline aborts. For raw inputs,
// additionally: the server's diagnosis of malformed bytes
// (proto/wire/parse_error.h) must find a problem exactly when protobuf
// refuses them, and a unary or Fetch request protobuf refuses must be
// INVALID_ARGUMENT "<request type> is malformed...".
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/dynamic_message.h"
#include "google/protobuf/message.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/wire/parse_error.h"
#include "server/server.h"
#include "tensord/v1/tensord.grpc.pb.h"
#include "tests/fuzz/fuzz_common.h"

namespace tensord::fuzz {
namespace {

namespace pb = ::google::protobuf;

struct Preset {
  std::string device;
  v1::DType dtype;
  std::vector<int64_t> shape;
  size_t element_bytes;
};

// Small tensors, several dtypes, both devices (cross-device errors), shapes
// that do and do not multiply or broadcast.
const std::vector<Preset>& Presets() {
  static const auto* presets = new std::vector<Preset>{
      {"cpu:0", v1::FLOAT32, {2, 3}, 4},  {"cpu:0", v1::FLOAT32, {3, 2}, 4},
      {"cpu:1", v1::FLOAT32, {2, 3}, 4},  {"cpu:0", v1::INT64, {3}, 8},
      {"cpu:0", v1::BOOL, {3}, 1},        {"cpu:0", v1::FLOAT64, {}, 8},
      {"cpu:0", v1::INT32, {2, 1, 3}, 4}, {"cpu:0", v1::FLOAT16, {2}, 2},
      {"cpu:1", v1::INT64, {4, 1}, 8},
      // An unbatched image [c, h, w]: conv2d and pooling reach their kernels.
      {"cpu:0", v1::FLOAT32, {2, 4, 4}, 4},
  };
  return *presets;
}

class Harness {
 public:
  explicit Harness(std::string rpc) : rpc_(std::move(rpc)) {
    const pb::ServiceDescriptor* service =
        pb::DescriptorPool::generated_pool()->FindServiceByName(
            "tensord.v1.TensorService");
    const pb::MethodDescriptor* method =
        service == nullptr ? nullptr : service->FindMethodByName(rpc_);
    if (method == nullptr) {
      std::fprintf(stderr, "TENSORD_FUZZ_RPC: no RPC named '%s'\n",
                   rpc_.c_str());
      std::abort();
    }
    request_prototype_ = pb::MessageFactory::generated_factory()->GetPrototype(
        method->input_type());
    path_ = "/tensord.v1.TensorService/" + rpc_;

    server::ServerOptions options;
    options.listen = "";  // in-process channel only
    options.runtime.host_devices = 2;
    options.runtime.host_memory_budget = 16 << 20;
    auto server = server::Server::Start(std::move(options));
    if (!server.ok()) {
      std::fprintf(stderr, "server: %s\n", server.status().ToString().c_str());
      std::abort();
    }
    server_ = std::move(*server);
    channel_ = server_->InProcessChannel();
    stub_ = v1::TensorService::NewStub(channel_);
    generic_ = std::make_unique<grpc::GenericStub>(channel_);

    foreign_session_ = OpenSession();
    foreign_handle_ = CreatePreset(foreign_session_, Presets()[0], 7);
    Restore();
  }

  void RunOne(const uint8_t* data, size_t size) {
    if (size == 0) return;
    const bool raw = (data[0] & 1) != 0;
    std::string_view payload(reinterpret_cast<const char*>(data) + 1, size - 1);
    std::vector<std::string> messages;
    if (IsClientStreaming(rpc_)) {
      messages = SplitStream(payload);
    } else {
      messages.emplace_back(payload);
    }
    if (!raw) {
      for (std::string& m : messages) {
        std::unique_ptr<pb::Message> request(request_prototype_->New());
        if (!request->ParseFromString(m)) return;  // not a request: skip
        Rewrite(request.get());
        m = request->SerializeAsString();
      }
    }
    // Raw inputs: whether protobuf takes each message, and whether the
    // diagnosis agrees.
    bool refused = false;
    if (raw) {
      for (const std::string& m : messages) {
        std::unique_ptr<pb::Message> request(request_prototype_->New());
        const bool parses = request->ParseFromString(m);
        const std::optional<std::string> problem =
            wire::FindParseError(*request->GetDescriptor(), m);
        if (parses == problem.has_value()) {
          std::fprintf(stderr,
                       "BUG: protobuf %s %zu bytes as a %s, the diagnosis "
                       "says: %s\n",
                       parses ? "parses" : "refuses", m.size(),
                       request->GetTypeName().c_str(),
                       problem.value_or("nothing wrong").c_str());
          std::abort();
        }
        refused = refused || !parses;
      }
    }
    std::vector<std::string> responses;
    const grpc::Status status = GenericCall(messages, &responses);
    const grpc::StatusCode code = status.error_code();
    if (code == grpc::StatusCode::UNIMPLEMENTED ||
        code == grpc::StatusCode::INTERNAL ||
        code == grpc::StatusCode::UNKNOWN ||
        code == grpc::StatusCode::DEADLINE_EXCEEDED) {
      std::fprintf(stderr, "BUG: %s answered a%s request with %d: %s\n",
                   rpc_.c_str(), raw ? " raw" : " valid",
                   static_cast<int>(code), status.error_message().c_str());
      std::abort();
    }
    const std::string malformed =
        request_prototype_->GetTypeName() + " is malformed";
    if (refused && !IsClientStreaming(rpc_) &&
        (code != grpc::StatusCode::INVALID_ARGUMENT ||
         status.error_message().rfind(malformed, 0) != 0)) {
      std::fprintf(stderr, "BUG: %s answered a malformed request with %d: %s\n",
                   rpc_.c_str(), static_cast<int>(code),
                   status.error_message().c_str());
      std::abort();
    }
    if (rpc_ == "OpenSession" && status.ok() && responses.size() == 1) {
      v1::OpenSessionResponse opened;
      if (opened.ParseFromString(responses[0])) CloseSession(opened.session());
    }
    Restore();
  }

 private:
  // Points the request at live objects: short `session` strings become the
  // live session, handle fields below kHandleSlots one of the live tensors
  // (the last slot is the foreign session's tensor).
  void Rewrite(pb::Message* m) {
    const pb::Descriptor* d = m->GetDescriptor();
    const pb::Reflection* r = m->GetReflection();
    for (int i = 0; i < d->field_count(); ++i) {
      const pb::FieldDescriptor* f = d->field(i);
      if (f->is_repeated()) {
        if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
          for (int j = 0; j < r->FieldSize(*m, f); ++j) {
            Rewrite(r->MutableRepeatedMessage(m, f, j));
          }
        }
        continue;
      }
      if (f->containing_oneof() != nullptr && !r->HasField(*m, f)) continue;
      switch (f->cpp_type()) {
        case pb::FieldDescriptor::CPPTYPE_STRING:
          if (f->name() == "session" && r->GetString(*m, f).size() < 4) {
            r->SetString(m, f, session_);
          }
          break;
        case pb::FieldDescriptor::CPPTYPE_UINT64:
          if (f->name() == "handle" || f->name() == "lhs" ||
              f->name() == "rhs") {
            const uint64_t v = r->GetUInt64(*m, f);
            if (v < kHandleSlots) {
              const uint64_t slot = v % (handles_.size() + 1);
              r->SetUInt64(
                  m, f,
                  slot < handles_.size() ? handles_[slot] : foreign_handle_);
            }
          }
          break;
        case pb::FieldDescriptor::CPPTYPE_MESSAGE:
          if (r->HasField(*m, f)) Rewrite(r->MutableMessage(m, f));
          break;
        default:
          break;
      }
    }
  }

  // Writes `messages` on one call of the fuzzed method and reads every
  // response; the generic call is a bidi stream on the wire, which serves
  // unary, client- and server-streaming methods alike.
  grpc::Status GenericCall(const std::vector<std::string>& messages,
                           std::vector<std::string>* responses) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(20));
    grpc::CompletionQueue cq;
    std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
        generic_->PrepareCall(&ctx, path_, &cq);
    void* tag = reinterpret_cast<void*>(1);
    auto wait = [&cq] {
      void* got = nullptr;
      bool ok = false;
      if (!cq.Next(&got, &ok)) return false;
      return ok;
    };
    call->StartCall(tag);
    if (wait()) {
      bool open = true;
      for (const std::string& m : messages) {
        grpc::Slice slice(m);
        grpc::ByteBuffer buffer(&slice, 1);
        call->Write(buffer, tag);
        if (!wait()) {
          open = false;
          break;
        }
      }
      if (open) {
        call->WritesDone(tag);
        wait();
      }
      for (;;) {
        grpc::ByteBuffer buffer;
        call->Read(&buffer, tag);
        if (!wait()) break;
        std::vector<grpc::Slice> slices;
        (void)buffer.Dump(&slices);
        std::string out;
        for (const grpc::Slice& s : slices) {
          out.append(reinterpret_cast<const char*>(s.begin()), s.size());
        }
        responses->push_back(std::move(out));
      }
    }
    grpc::Status status;
    call->Finish(&status, tag);
    wait();
    cq.Shutdown();
    void* got;
    bool ok;
    while (cq.Next(&got, &ok)) {
    }
    return status;
  }

  std::string OpenSession() {
    grpc::ClientContext ctx;
    v1::OpenSessionRequest req;
    req.set_client_name("fuzzer");
    v1::OpenSessionResponse resp;
    Check(stub_->OpenSession(&ctx, req, &resp), "OpenSession");
    return resp.session();
  }

  void CloseSession(const std::string& session) {
    grpc::ClientContext ctx;
    v1::CloseSessionRequest req;
    req.set_session(session);
    v1::CloseSessionResponse resp;
    (void)stub_->CloseSession(&ctx, req, &resp);
  }

  uint64_t CreatePreset(const std::string& session, const Preset& p, int salt) {
    int64_t numel = 1;
    for (int64_t d : p.shape) numel *= d;
    std::string data(static_cast<size_t>(numel) * p.element_bytes, '\0');
    for (size_t i = 0; i < data.size(); i += p.element_bytes) {
      // Small positive values whatever the dtype (bool: 0/1).
      data[i] = static_cast<char>(p.dtype == v1::BOOL ? (i + salt) & 1
                                                      : 1 + (i + salt) % 5);
      if (p.dtype == v1::FLOAT32) {
        const float f = 1.0f + static_cast<float>((i + salt) % 5);
        std::memcpy(&data[i], &f, 4);
      } else if (p.dtype == v1::FLOAT64) {
        const double f = 2.5;
        std::memcpy(&data[i], &f, 8);
      } else if (p.dtype == v1::FLOAT16) {
        data[i] = 0;
        data[i + 1] = 0x3c;  // 1.0
      }
    }
    grpc::ClientContext ctx;
    v1::CreateRequest req;
    req.set_session(session);
    req.set_device(p.device);
    req.set_dtype(p.dtype);
    for (int64_t d : p.shape) req.add_shape(d);
    req.set_data(data);
    v1::TensorResponse resp;
    Check(stub_->Create(&ctx, req, &resp), "Create");
    return resp.tensor().handle();
  }

  // Back to: the live session open, holding exactly the presets.
  void Restore() {
    std::set<uint64_t> live;
    bool tracked = false;
    if (!session_.empty()) {
      grpc::ClientContext ctx;
      v1::ListTensorsRequest req;
      req.set_session(session_);
      v1::ListTensorsResponse resp;
      const grpc::Status s = stub_->ListTensors(&ctx, req, &resp);
      if (s.ok()) {
        for (const v1::TensorInfo& t : resp.tensors()) {
          live.insert(t.handle());
          // A preset marked for autograd (or given a grad) is made anew,
          // so that every input starts from the same state.
          if (t.requires_grad()) tracked = true;
        }
      } else {
        session_.clear();
      }
    }
    if (session_.empty()) {
      session_ = OpenSession();
      handles_.clear();
    }
    bool complete = handles_.size() == Presets().size() && !tracked;
    for (uint64_t h : handles_) complete = complete && live.count(h) > 0;
    for (uint64_t h : live) {
      bool preset = false;
      for (uint64_t p : handles_) preset = preset || p == h;
      if (!preset || !complete) Release(h);
    }
    if (!complete) {
      handles_.clear();
      for (size_t i = 0; i < Presets().size(); ++i) {
        handles_.push_back(
            CreatePreset(session_, Presets()[i], static_cast<int>(i)));
      }
    }
  }

  void Release(uint64_t handle) {
    grpc::ClientContext ctx;
    v1::ReleaseRequest req;
    req.set_session(session_);
    req.set_handle(handle);
    v1::ReleaseResponse resp;
    Check(stub_->Release(&ctx, req, &resp), "Release");
  }

  static void Check(const grpc::Status& s, const char* what) {
    if (s.ok()) return;
    std::fprintf(stderr, "fuzz harness: %s failed: %d %s\n", what,
                 static_cast<int>(s.error_code()), s.error_message().c_str());
    std::abort();
  }

  const std::string rpc_;
  std::string path_;
  const pb::Message* request_prototype_ = nullptr;
  std::unique_ptr<server::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::TensorService::Stub> stub_;
  std::unique_ptr<grpc::GenericStub> generic_;
  std::string session_;
  std::vector<uint64_t> handles_;
  std::string foreign_session_;
  uint64_t foreign_handle_ = 0;
};

Harness* harness = nullptr;

}  // namespace
}  // namespace tensord::fuzz

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  const char* rpc = std::getenv("TENSORD_FUZZ_RPC");
  if (rpc == nullptr || *rpc == '\0') {
    std::fprintf(stderr,
                 "set TENSORD_FUZZ_RPC to the RPC to fuzz (e.g. Create)\n");
    std::abort();
  }
  // Every rejected request would log a line; the fuzzer sends millions.
  if (std::getenv("TENSORD_FUZZ_LOG") == nullptr) {
    spdlog::set_level(spdlog::level::off);
    // protobuf logs each string field of invalid UTF-8 it refuses.
    google::protobuf::SetLogHandler(nullptr);
  }
  // Kept for the whole run: the server is the system under test and is torn
  // down by process exit (LeakSanitizer checks each input, not the end).
  tensord::fuzz::harness = new tensord::fuzz::Harness(rpc);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tensord::fuzz::harness->RunOne(data, size);
  return 0;
}
