// libFuzzer target: arbitrary bytes as the request of one TensorService or
// NodeService RPC, sent to a real in-process tensord::server::Server.
//
// One binary serves every RPC: TENSORD_FUZZ_RPC=<method> (e.g. Create,
// Upload, Execute, PullChunk) picks the target. At start-up it starts a
// Server with no listening socket (two host devices, small budgets), opens a
// session and pre-creates a few tensors (several dtypes, both devices) and
// two programs (RestorePrograms) plus one tensor in a second, "foreign"
// session. Each input (layout in fuzz_common.h) is sent through
// grpc::GenericStub, so the server parses the bytes itself; the structured
// mode points session, handle, program and grant fields at the live objects
// so the fuzzer reaches the runtime, not only the NOT_FOUND checks. After
// each input the live session is put back as it was (extra tensors and
// programs released, missing ones re-created, a closed session re-opened),
// and so are the live grants (a redeemed or finished one issued anew).
//
// Moves between nodes (GrantTransfer, Import, PullChunk). The fuzzed server
// is a node (kSelfNode) with a node token file (written to a temporary
// directory, removed once the server has read it at start) and one peer,
// kPeerNode: a second in-process Server listening on loopback TCP (an
// ephemeral port). Import pulls over the network, so its source must
// listen; a live peer rather than an address that fails fast, so that
// Import reaches its whole path (the upload, the pulls ahead, the finish)
// with grants the peer issued for kSelfNode. Each Import stays well within
// the deadline: the peer answers at once over loopback, and Import sleeps
// between retries only after UNAVAILABLE or DEADLINE_EXCEEDED, which a live
// peer does not answer (a peer that is down would cost 0.7 s of retries
// per input). PullChunk is called with the node token the input's mode byte
// picks (fuzz_common.h). A GrantTransfer the fuzzer makes is finished at
// once when its destination has a token here; one that cannot be (another
// valid node name) stays open until its ttl, and before those could fill the
// server's table (GrantTable::kMaxGrants) the fuzzed server is started
// anew, so every input meets the same limits.
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
#include <filesystem>
#include <fstream>
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
using Clock = std::chrono::steady_clock;

// Every node's token (the file NodeTokens reads: "NAME TOKEN" lines).
struct NodeToken {
  const char* node;
  const char* token;
};
constexpr NodeToken kNodeTokens[] = {
    {kSelfNode, "fuzz-a-node-token-0123456789"},
    {kPeerNode, "fuzz-b-node-token-0123456789"},
    {kOtherNode, "fuzz-c-node-token-0123456789"},
};
const char* TokenOf(std::string_view node) {
  for (const NodeToken& t : kNodeTokens) {
    if (node == t.node) return t.token;
  }
  return nullptr;
}

// The harness's grants: their ttl (GrantTable::kMaxTtl), and the age at
// which they are issued anew.
constexpr int64_t kGrantTtlMs = 600'000;
constexpr auto kGrantRefresh = std::chrono::minutes(5);
// Grants the fuzzer made that nothing here can finish (their destination
// has no token): this many open, and the fuzzed server starts anew (its
// limit: GrantTable::kMaxGrants, 1024).
constexpr size_t kMaxLingeringGrants = 768;

// The node token file, for as long as a server start needs it (the server
// reads it once, at start).
class TokenFile {
 public:
  TokenFile() {
    std::string dir =
        (std::filesystem::temp_directory_path() / "tensord-fuzz-XXXXXX")
            .string();
    if (mkdtemp(dir.data()) == nullptr) {
      std::perror("fuzz harness: mkdtemp");
      std::abort();
    }
    dir_ = dir;
    std::ofstream out(path());
    for (const NodeToken& t : kNodeTokens) {
      out << t.node << " " << t.token << "\n";
    }
  }
  ~TokenFile() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  std::string path() const { return dir_ + "/node-tokens"; }

 private:
  std::string dir_;
};

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

// The live grants (fuzz_common.h's GrantSlot), in slot order.
struct GrantSpec {
  Preset tensor;
  bool to_other_node = false;  // else to the grantee
  bool session_ended = false;  // its session closed once granted
};
const std::vector<GrantSpec>& GrantSpecs() {
  static const auto* specs = new std::vector<GrantSpec>{
      {{"cpu:0", v1::FLOAT32, {2, 3}, 4}},
      {{"cpu:1", v1::INT64, {4, 1}, 8}},
      {{"cpu:0", v1::FLOAT16, {2}, 2}},
      // Past one chunk: PullChunk's max_bytes cap (4 MiB - 64 KiB) and
      // Import's pulls ahead (1 MiB chunks).
      {{"cpu:0", v1::FLOAT32, {1 << 20}, 4}},
      {{"cpu:0", v1::FLOAT32, {0}, 4}},
      {{"cpu:0", v1::FLOAT32, {2, 3}, 4}, true},
      {{"cpu:0", v1::BOOL, {3}, 1}, false, true},
  };
  static_assert(kGrantSlots == 7);
  return *specs;
}

class Harness {
 public:
  explicit Harness(std::string rpc) : rpc_(std::move(rpc)) {
    const pb::MethodDescriptor* method = nullptr;
    for (const char* name :
         {"tensord.v1.TensorService", "tensord.v1.NodeService"}) {
      const pb::ServiceDescriptor* service =
          pb::DescriptorPool::generated_pool()->FindServiceByName(name);
      method = service == nullptr ? nullptr : service->FindMethodByName(rpc_);
      if (method != nullptr) break;
    }
    if (method == nullptr) {
      std::fprintf(stderr, "TENSORD_FUZZ_RPC: no RPC named '%s'\n",
                   rpc_.c_str());
      std::abort();
    }
    request_prototype_ = pb::MessageFactory::generated_factory()->GetPrototype(
        method->input_type());
    path_ = "/" + method->service()->full_name() + "/" + rpc_;
    node_call_ = method->service()->name() == "NodeService";

    // The peer first: the fuzzed server's --peers names its address.
    TokenFile tokens;
    peer_ = StartServer(kPeerNode, "127.0.0.1:0", "", tokens.path());
    peer_channel_ = peer_->InProcessChannel();
    peer_stub_ = v1::TensorService::NewStub(peer_channel_);
    peer_node_stub_ = v1::NodeService::NewStub(peer_channel_);
    StartSelf(tokens.path());
  }

  void RunOne(const uint8_t* data, size_t size) {
    if (size == 0) return;
    const bool raw = (data[0] & 1) != 0;
    const auto caller = static_cast<Caller>((data[0] >> 1) % kCallers);
    used_grants_.clear();
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
    const grpc::Status status = GenericCall(messages, caller, &responses);
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
      if (opened.ParseFromString(responses[0])) {
        CloseSession(*stub_, opened.session());
      }
    }
    if (rpc_ == "GrantTransfer" && status.ok() && responses.size() == 1) {
      EndFuzzerGrant(messages[0], responses[0]);
    }
    if (status.ok()) {
      // A grant the input redeemed (Import) or finished (PullChunk) is
      // issued anew.
      v1::PullChunkRequest pull;
      const bool consumed =
          rpc_ == "Import" ||
          (rpc_ == "PullChunk" && pull.ParseFromString(messages[0]) &&
           pull.finish());
      if (consumed) {
        for (size_t slot : used_grants_) grants_[slot].stale = true;
      }
    }
    if (lingering_.size() >= kMaxLingeringGrants) {
      const Clock::time_point now = Clock::now();
      std::erase_if(lingering_,
                    [now](Clock::time_point end) { return end < now; });
      if (lingering_.size() >= kMaxLingeringGrants) {
        TokenFile tokens;
        StartSelf(tokens.path());
      }
    }
    Restore();
  }

 private:
  // Points the request at live objects: short `session` strings become the
  // live session, handle fields below kHandleSlots one of the live tensors
  // (the last slot is the foreign session's tensor), short `grant` strings
  // one of the live grants.
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
        // A collective's tensors: handles, as single handle fields are.
        if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_UINT64 &&
            f->name() == "tensors") {
          for (int j = 0; j < r->FieldSize(*m, f); ++j) {
            const uint64_t v = r->GetRepeatedUInt64(*m, f, j);
            if (v >= kHandleSlots) continue;
            const uint64_t slot = v % (handles_.size() + 1);
            r->SetRepeatedUInt64(
                m, f, j,
                slot < handles_.size() ? handles_[slot] : foreign_handle_);
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
          if (f->name() == "grant" && !grants_.empty()) {
            const std::string v = r->GetString(*m, f);
            if (v.size() < 4) {
              const size_t slot =
                  (v.empty() ? 0 : static_cast<uint8_t>(v[0])) % grants_.size();
              r->SetString(m, f, grants_[slot].id);
              used_grants_.push_back(slot);
            }
          }
          break;
        case pb::FieldDescriptor::CPPTYPE_UINT64:
          if (f->name() == "program") {
            const uint64_t v = r->GetUInt64(*m, f);
            if (v < kHandleSlots) {
              const uint64_t slot = v % (programs_.size() + 1);
              r->SetUInt64(m, f,
                           slot < programs_.size() ? programs_[slot]
                                                   : foreign_handle_);
            }
          }
          if (f->name() == "group" && !groups_.empty()) {
            const uint64_t v = r->GetUInt64(*m, f);
            if (v < kHandleSlots) r->SetUInt64(m, f, groups_[v % groups_.size()]);
          }
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
                           Caller caller, std::vector<std::string>* responses) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(20));
    if (node_call_) {
      switch (caller) {
        case Caller::kGrantee:
          ctx.AddMetadata("authorization",
                          std::string("Bearer ") + TokenOf(grantee_));
          break;
        case Caller::kOtherNode:
          ctx.AddMetadata("authorization",
                          std::string("Bearer ") + TokenOf(kOtherNode));
          break;
        case Caller::kNoToken:
          break;
        case Caller::kUnknownToken:
          ctx.AddMetadata("authorization", "Bearer a-client-token-0123456789");
          break;
        case Caller::kNotBearer:
          ctx.AddMetadata("authorization", TokenOf(grantee_));
          break;
      }
    }
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

  // The fuzzed server (node kSelfNode), anew: its session and tensors, the
  // foreign session, and, where the target needs them, the live grants.
  void StartSelf(const std::string& token_file) {
    // Grants the peer holds for the old server: ended, with their session.
    if (grant_stub_ == peer_stub_.get() && !grant_session_.empty()) {
      for (size_t slot = 0; slot < grants_.size(); ++slot) {
        if (grants_[slot].id.empty()) continue;
        (void)FinishGrant(
            *grant_node_stub_, grants_[slot].id,
            GrantSpecs()[slot].to_other_node ? kOtherNode : grantee_);
      }
      CloseSession(*grant_stub_, grant_session_);
    }
    grant_stub_ = nullptr;
    grant_node_stub_ = nullptr;
    grant_session_.clear();
    generic_.reset();
    stub_.reset();
    node_stub_.reset();
    channel_.reset();
    server_.reset();
    session_.clear();
    handles_.clear();
    lingering_.clear();
    grants_.clear();
    server_ = StartServer(kSelfNode, "",
                          std::string(kPeerNode) + "=" + peer_->address(),
                          token_file);
    channel_ = server_->InProcessChannel();
    stub_ = v1::TensorService::NewStub(channel_);
    node_stub_ = v1::NodeService::NewStub(channel_);
    generic_ = std::make_unique<grpc::GenericStub>(channel_);

    foreign_session_ = OpenSession(*stub_);
    foreign_handle_ = CreatePreset(*stub_, foreign_session_, Presets()[0], 7);
    // The live grants: the fuzzed server's own for PullChunk (to the node
    // that pulls them); the peer's, for this node, for Import.
    if (rpc_ == "PullChunk") {
      grant_stub_ = stub_.get();
      grant_node_stub_ = node_stub_.get();
      grantee_ = kPeerNode;
    } else if (rpc_ == "Import") {
      grant_stub_ = peer_stub_.get();
      grant_node_stub_ = peer_node_stub_.get();
      grantee_ = kSelfNode;
    }
    if (grant_stub_ != nullptr) {
      grant_session_ = OpenSession(*grant_stub_);
      grants_.resize(GrantSpecs().size());
      for (LiveGrant& g : grants_) g.stale = true;
    }
    Restore();
  }

  static std::unique_ptr<server::Server> StartServer(
      const char* node, const std::string& listen, const std::string& peers,
      const std::string& token_file) {
    server::ServerOptions options;
    options.listen = listen;  // "": in-process channel only
    options.runtime.host_devices = 2;
    options.runtime.host_memory_budget = 16 << 20;
    options.runtime.node_name = node;
    options.node_token_file = token_file;
    options.peers = peers;
    auto server = server::Server::Start(std::move(options));
    if (!server.ok()) {
      std::fprintf(stderr, "server %s: %s\n", node,
                   server.status().ToString().c_str());
      std::abort();
    }
    return std::move(*server);
  }

  // Issues the live grants that are stale (redeemed, finished, never
  // issued) or old, each of a tensor created for it in the grant session.
  void RefreshGrants() {
    const Clock::time_point now = Clock::now();
    for (size_t slot = 0; slot < grants_.size(); ++slot) {
      LiveGrant& g = grants_[slot];
      if (!g.stale && now - g.issued < kGrantRefresh) continue;
      const GrantSpec& spec = GrantSpecs()[slot];
      const char* destination = spec.to_other_node ? kOtherNode : grantee_;
      // Ends the old grant, if it is still open (an Import finishes its own).
      if (!g.id.empty()) {
        (void)FinishGrant(*grant_node_stub_, g.id, destination);
      }
      std::string session = grant_session_;
      if (spec.session_ended) session = OpenSession(*grant_stub_);
      if (g.handle == 0 || spec.session_ended) {
        g.handle = CreatePreset(*grant_stub_, session, spec.tensor,
                                static_cast<int>(slot));
      }
      grpc::ClientContext ctx;
      v1::GrantTransferRequest req;
      req.set_session(session);
      req.set_handle(g.handle);
      req.set_destination_node(destination);
      req.set_ttl_ms(kGrantTtlMs);
      v1::GrantTransferResponse resp;
      Check(grant_stub_->GrantTransfer(&ctx, req, &resp), "GrantTransfer");
      if (spec.session_ended) CloseSession(*grant_stub_, session);
      g.id = resp.grant();
      g.issued = now;
      g.stale = false;
    }
  }

  // Ends a grant as its destination does (PullChunk `finish`); false when
  // that node has no token here.
  static bool FinishGrant(v1::NodeService::Stub& node, const std::string& grant,
                          std::string_view destination,
                          grpc::Status* status = nullptr) {
    const char* token = TokenOf(destination);
    if (token == nullptr) return false;
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", std::string("Bearer ") + token);
    v1::PullChunkRequest req;
    req.set_grant(grant);
    req.set_finish(true);
    v1::PullChunkResponse resp;
    const grpc::Status s = node.PullChunk(&ctx, req, &resp);
    if (status != nullptr) *status = s;
    return true;
  }

  // A grant the fuzzer made: finished at once when its destination has a
  // token here (it must still be open), else left to its ttl and counted.
  void EndFuzzerGrant(const std::string& request, const std::string& response) {
    v1::GrantTransferRequest asked;
    v1::GrantTransferResponse granted;
    if (!asked.ParseFromString(request) || !granted.ParseFromString(response)) {
      return;
    }
    grpc::Status finished;
    if (FinishGrant(*node_stub_, granted.grant(), asked.destination_node(),
                    &finished)) {
      Check(finished, "PullChunk finish of a grant GrantTransfer just made");
      return;
    }
    lingering_.push_back(Clock::now() +
                         std::chrono::milliseconds(granted.expires_ms()));
  }

  std::string OpenSession(v1::TensorService::Stub& stub) {
    grpc::ClientContext ctx;
    v1::OpenSessionRequest req;
    req.set_client_name("fuzzer");
    v1::OpenSessionResponse resp;
    Check(stub.OpenSession(&ctx, req, &resp), "OpenSession");
    return resp.session();
  }

  void CloseSession(v1::TensorService::Stub& stub, const std::string& session) {
    grpc::ClientContext ctx;
    v1::CloseSessionRequest req;
    req.set_session(session);
    v1::CloseSessionResponse resp;
    (void)stub.CloseSession(&ctx, req, &resp);
  }

  uint64_t CreatePreset(v1::TensorService::Stub& stub,
                        const std::string& session, const Preset& p, int salt) {
    int64_t numel = 1;
    for (int64_t d : p.shape) numel *= d;
    grpc::ClientContext ctx;
    v1::CreateRequest req;
    req.set_session(session);
    req.set_device(p.device);
    req.set_dtype(p.dtype);
    for (int64_t d : p.shape) req.add_shape(d);
    v1::TensorResponse resp;
    if (numel > 4096) {  // large: filled by the server
      req.mutable_fill()->set_kind(v1::Fill::ARANGE);
      req.mutable_fill()->set_end(static_cast<double>(numel));
      Check(stub.Create(&ctx, req, &resp), "Create");
      return resp.tensor().handle();
    }
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
    req.set_data(data);
    Check(stub.Create(&ctx, req, &resp), "Create");
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
      session_ = OpenSession(*stub_);
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
            CreatePreset(*stub_, session_, Presets()[i], static_cast<int>(i)));
      }
    }
    RestorePrograms(!complete);
    RestoreGroups();
    RefreshGrants();
  }

  // The session's programs back to exactly the preset ones (made anew
  // when the presets they bind were): `kProgramSlots` slots of the
  // program ids RunProgram and ReleaseProgram are rewritten to.
  void RestorePrograms(bool presets_made) {
    grpc::ClientContext ctx;
    v1::ListProgramsRequest req;
    req.set_session(session_);
    v1::ListProgramsResponse resp;
    Check(stub_->ListPrograms(&ctx, req, &resp), "ListPrograms");
    std::set<uint64_t> live;
    for (const v1::ProgramInfo& p : resp.programs()) live.insert(p.program());
    bool complete = !presets_made && !programs_.empty();
    for (uint64_t id : programs_) complete = complete && live.count(id) > 0;
    for (uint64_t id : live) {
      bool preset = false;
      for (uint64_t p : programs_) preset = preset || p == id;
      if (!preset || !complete) ReleaseProgram(id);
    }
    if (complete) return;
    programs_.clear();
    // Slot 0: input #0 float32 [2, 3] on cpu:0 plus preset 0 (bound).
    v1::RegisterProgramRequest add;
    add.set_session(session_);
    v1::ProgramInput* in = add.add_inputs();
    in->set_dtype(v1::FLOAT32);
    in->add_shape(2);
    in->add_shape(3);
    in->set_device("cpu:0");
    v1::BinaryArgs* sum = add.add_ops()->mutable_binary();
    sum->set_op(v1::ADD);
    sum->mutable_lhs()->set_input(0);
    sum->mutable_rhs()->set_handle(handles_[0]);
    add.add_keep(0);
    programs_.push_back(RegisterProgram(add));
    // Slot 1: input #0 [2, 3] @ input #1 [3, 2], then its sum (0-d, its
    // value in the reply).
    v1::RegisterProgramRequest mm;
    mm.set_session(session_);
    *mm.add_inputs() = *in;
    v1::ProgramInput* in1 = mm.add_inputs();
    *in1 = *in;
    in1->set_shape(0, 3);
    in1->set_shape(1, 2);
    v1::MatMulArgs* product = mm.add_ops()->mutable_matmul();
    product->mutable_lhs()->set_input(0);
    product->mutable_rhs()->set_input(1);
    v1::ReduceArgs* reduce = mm.add_ops()->mutable_reduce();
    reduce->set_op(v1::SUM);
    reduce->mutable_x()->set_result_of(0);
    mm.add_keep(1);
    programs_.push_back(RegisterProgram(mm));
  }

  // The session's process groups back to the one preset group (cpu:0,
  // cpu:1) that `group` ids are rewritten to; made anew with the session.
  void RestoreGroups() {
    grpc::ClientContext ctx;
    v1::ListGroupsRequest req;
    req.set_session(session_);
    v1::ListGroupsResponse resp;
    Check(stub_->ListGroups(&ctx, req, &resp), "ListGroups");
    bool kept = false;
    for (const v1::GroupInfo& g : resp.groups()) {
      if (!groups_.empty() && g.group() == groups_[0]) {
        kept = true;
        continue;
      }
      grpc::ClientContext destroy_ctx;
      v1::DestroyGroupRequest destroy;
      destroy.set_session(session_);
      destroy.set_group(g.group());
      v1::DestroyGroupResponse destroyed;
      Check(stub_->DestroyGroup(&destroy_ctx, destroy, &destroyed),
            "DestroyGroup");
    }
    if (kept) return;
    groups_.clear();
    grpc::ClientContext create_ctx;
    v1::CreateGroupRequest create;
    create.set_session(session_);
    create.add_devices("cpu:0");
    create.add_devices("cpu:1");
    v1::CreateGroupResponse created;
    const grpc::Status s = stub_->CreateGroup(&create_ctx, create, &created);
    // A build without Gloo has no groups: its collectives are refused.
    if (s.ok()) groups_.push_back(created.group().group());
  }

  uint64_t RegisterProgram(const v1::RegisterProgramRequest& req) {
    grpc::ClientContext ctx;
    v1::RegisterProgramResponse resp;
    Check(stub_->RegisterProgram(&ctx, req, &resp), "RegisterProgram");
    return resp.program().program();
  }

  void ReleaseProgram(uint64_t id) {
    grpc::ClientContext ctx;
    v1::ReleaseProgramRequest req;
    req.set_session(session_);
    req.set_program(id);
    v1::ReleaseProgramResponse resp;
    Check(stub_->ReleaseProgram(&ctx, req, &resp), "ReleaseProgram");
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

  struct LiveGrant {
    std::string id;
    uint64_t handle = 0;  // the tensor granted, in the grant session
    Clock::time_point issued;
    bool stale = true;  // issue anew before the next input
  };

  const std::string rpc_;
  std::string path_;
  bool node_call_ = false;  // a NodeService method
  const pb::Message* request_prototype_ = nullptr;
  // The peer (node kPeerNode), listening on loopback.
  std::unique_ptr<server::Server> peer_;
  std::shared_ptr<grpc::Channel> peer_channel_;
  std::unique_ptr<v1::TensorService::Stub> peer_stub_;
  std::unique_ptr<v1::NodeService::Stub> peer_node_stub_;
  // The fuzzed server (node kSelfNode).
  std::unique_ptr<server::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::TensorService::Stub> stub_;
  std::unique_ptr<v1::NodeService::Stub> node_stub_;
  std::unique_ptr<grpc::GenericStub> generic_;
  std::string session_;
  std::vector<uint64_t> handles_;
  std::vector<uint64_t> programs_;  // RestorePrograms' preset programs
  std::vector<uint64_t> groups_;    // RestoreGroups' preset group
  std::string foreign_session_;
  uint64_t foreign_handle_ = 0;
  // The live grants (PullChunk, Import; else none): issued by the server
  // behind grant_stub_ (borrowed) from grant_session_, to grantee_.
  v1::TensorService::Stub* grant_stub_ = nullptr;
  v1::NodeService::Stub* grant_node_stub_ = nullptr;
  const char* grantee_ = kPeerNode;
  std::string grant_session_;
  std::vector<LiveGrant> grants_;
  std::vector<size_t> used_grants_;  // the slots this input's request names
  // When the fuzzer's grants nothing here can finish run out.
  std::vector<Clock::time_point> lingering_;
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
