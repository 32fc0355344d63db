#include "server/node_transfers.h"

#include <isa-l/crc.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <deque>
#include <fstream>
#include <future>
#include <random>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/base/absl_compat.h"
#include "core/base/refusal.h"
#include "core/base/status.h"
#include "proto/wire/op_convert.h"
#include "server/grpc_convert.h"
#include "server/grpc_rpc.h"
#include "server/grpc_status.h"

namespace tensord::server {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMinTokenBytes = 16;
constexpr uint32_t kMaxChunkBytes = (4 << 20) - (64 << 10);
constexpr int kPullAttempts = 4;
// Chunks a destination asks for ahead of the one it is writing, so that
// the source's reads, the wire and the destination's writes overlap.
constexpr size_t kPullWindow = 4;

std::array<unsigned char, 32> Sha256(std::string_view text) {
  std::array<unsigned char, 32> out;
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(),
         out.data());
  return out;
}

std::string RandomGrant() {
  std::random_device rd;
  std::string out;
  for (int i = 0; i < 4; ++i) absl::StrAppendFormat(&out, "%08x", rd());
  return out;
}

// zlib's CRC-32, as Fetch's chunks carry (ISA-L's, as grpc_service.cc).
uint32_t Crc32(std::string_view data) {
  return crc32_gzip_refl(0, reinterpret_cast<const unsigned char*>(data.data()),
                         data.size());
}

}  // namespace

// --- NodeTokens --------------------------------------------------------------

absl::StatusOr<NodeTokens> NodeTokens::FromFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read the node token file ", path));
  }
  std::stringstream text;
  text << in.rdbuf();
  return FromText(text.str(), path);
}

absl::StatusOr<NodeTokens> NodeTokens::FromText(std::string_view text,
                                                std::string_view where) {
  NodeTokens out;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(core::ToAbsl(text), '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    std::vector<std::string> parts =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    auto bad = [&](const std::string& why) {
      return absl::InvalidArgumentError(
          absl::StrCat(core::ToAbsl(where), ":", line_number, ": ", why));
    };
    if (parts.size() != 2) return bad("expected \"NODE-NAME TOKEN\"");
    RETURN_IF_ERROR(core::CheckNodeName(parts[0]));
    if (parts[1].size() < kMinTokenBytes) {
      return bad(absl::StrCat("the token of node ", parts[0],
                              " is shorter than ", kMinTokenBytes, " bytes"));
    }
    const Digest digest = Sha256(parts[1]);
    for (const auto& [d, name] : out.digests_) {
      if (d == digest) return bad("a token given to two nodes");
    }
    if (!out.tokens_.emplace(std::string(parts[0]), std::string(parts[1]))
             .second) {
      return bad(absl::StrCat("node ", parts[0], " listed twice"));
    }
    out.digests_.emplace_back(digest, std::string(parts[0]));
  }
  if (out.tokens_.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(core::ToAbsl(where), ": no \"NODE-NAME TOKEN\" line"));
  }
  return out;
}

absl::StatusOr<std::string> NodeTokens::Authenticate(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const {
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return core::MarkRefusal(
        absl::UnauthenticatedError(
            "node-to-node call without a node token (authorization: Bearer)"),
        core::Refusal::kNoToken);
  }
  std::string_view value(it->second.data(), it->second.size());
  if (!value.starts_with("Bearer ")) {
    return core::MarkRefusal(
        absl::UnauthenticatedError("malformed authorization metadata"),
        core::Refusal::kBadToken);
  }
  value.remove_prefix(7);
  const Digest digest = Sha256(value);
  const std::string* found = nullptr;
  for (const auto& [d, name] : digests_) {  // every one, in constant time
    if (CRYPTO_memcmp(d.data(), digest.data(), d.size()) == 0) found = &name;
  }
  if (found == nullptr) {
    return core::MarkRefusal(
        absl::UnauthenticatedError(
            "the token is not a node's (node-to-node calls need a token from "
            "--node-token-file; a client's is not accepted)"),
        core::Refusal::kBadToken);
  }
  return *found;
}

absl::StatusOr<std::string> NodeTokens::TokenOf(std::string_view name) const {
  auto it = tokens_.find(std::string(name));
  if (it == tokens_.end()) {
    return absl::NotFoundError(
        absl::StrCat("the node token file has no token for this node ('",
                     core::ToAbsl(name), "')"));
  }
  return it->second;
}

// --- PeerDirectory -----------------------------------------------------------

absl::StatusOr<PeerDirectory> PeerDirectory::Make(std::string_view peers,
                                                  std::string_view pattern) {
  PeerDirectory out;
  for (absl::string_view piece :
       absl::StrSplit(core::ToAbsl(peers), ',', absl::SkipWhitespace())) {
    piece = absl::StripAsciiWhitespace(piece);
    const std::string_view entry(piece.data(), piece.size());
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos || eq + 1 == entry.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--peers entry '", piece, "': expected NAME=HOST:PORT"));
    }
    RETURN_IF_ERROR(core::CheckNodeName(entry.substr(0, eq)));
    out.listed_.emplace(std::string(entry.substr(0, eq)),
                        std::string(entry.substr(eq + 1)));
  }
  if (!pattern.empty() && pattern.find("{node}") == std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--peer-address-pattern '", core::ToAbsl(pattern),
                     "' has no {node} for the node's name"));
  }
  out.pattern_ = std::string(pattern);
  return out;
}

absl::StatusOr<std::string> PeerDirectory::AddressOf(
    std::string_view node) const {
  RETURN_IF_ERROR(core::CheckNodeName(node));
  if (auto it = listed_.find(node); it != listed_.end()) return it->second;
  if (pattern_.empty()) {
    return absl::NotFoundError(
        absl::StrCat("node '", core::ToAbsl(node),
                     "' is not among this server's peers (--peers, "
                     "--peer-address-pattern)"));
  }
  std::string out = pattern_;
  for (size_t at; (at = out.find("{node}")) != std::string::npos;) {
    out.replace(at, 6, node);
  }
  return out;
}

// --- GrantTable --------------------------------------------------------------

void GrantTable::DropExpired(Clock::time_point now) {
  for (auto it = grants_.begin(); it != grants_.end();) {
    if (it->second->deadline < now) {
      grants_.erase(it++);
    } else {
      ++it;
    }
  }
}

absl::StatusOr<GrantTable::Issued> GrantTable::Issue(
    std::unique_ptr<core::Runtime::Reader> reader, std::string destination,
    std::chrono::milliseconds ttl) {
  if (ttl.count() == 0) ttl = kDefaultTtl;
  if (ttl.count() < 0 || ttl > kMaxTtl) {
    return absl::InvalidArgumentError(absl::StrCat("ttl_ms is ", ttl.count(),
                                                   "; expected 0 (60000) to ",
                                                   kMaxTtl.count()));
  }
  auto grant = std::make_shared<Grant>();
  grant->destination = std::move(destination);
  grant->deadline = Clock::now() + ttl;
  grant->reader = std::move(reader);
  std::lock_guard<std::mutex> lock(mu_);
  DropExpired(Clock::now());
  if (grants_.size() >= kMaxGrants) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this server has ", grants_.size(),
        " transfer grants open, its limit: import or let some expire first"));
  }
  std::string id = RandomGrant();
  grants_.emplace(id, std::move(grant));
  return Issued{std::move(id), ttl};
}

absl::Status GrantTable::CheckForm(std::string_view grant) {
  if (grant.empty() || grant.size() > kMaxGrantBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("grant is ", grant.size(),
                     " bytes; expected the 32 hex digits "
                     "GrantTransfer returned (",
                     kMaxGrantBytes, " bytes at most)"));
  }
  return absl::OkStatus();
}

absl::Status GrantTable::Pull(const v1::PullChunkRequest& req,
                              std::string_view caller,
                              v1::PullChunkResponse* resp) {
  RETURN_IF_ERROR(CheckForm(req.grant()));
  std::shared_ptr<Grant> grant;
  {
    std::lock_guard<std::mutex> lock(mu_);
    DropExpired(Clock::now());
    auto it = grants_.find(req.grant());
    if (it == grants_.end()) {
      return absl::NotFoundError(
          "no such transfer grant (finished, expired or never issued)");
    }
    if (it->second->destination != caller) {
      return absl::PermissionDeniedError(
          absl::StrCat("the grant is for node '", it->second->destination,
                       "', not '", core::ToAbsl(caller), "'"));
    }
    grant = it->second;
    if (req.finish()) {
      grants_.erase(it);
      return absl::OkStatus();
    }
  }
  std::lock_guard<std::mutex> lock(grant->mu);
  const core::TensorMeta& meta = grant->reader->meta();
  if (req.offset() > meta.nbytes) {
    return absl::OutOfRangeError(absl::StrCat("offset ", req.offset(),
                                              " is past the tensor's ",
                                              meta.nbytes, " bytes"));
  }
  core::TensorMeta shape_only = meta;
  shape_only.handle = 0;
  shape_only.tag.clear();
  ToProto(shape_only, resp->mutable_tensor());
  const uint32_t max = req.max_bytes() == 0
                           ? (1u << 20)
                           : std::min(req.max_bytes(), kMaxChunkBytes);
  const uint64_t n = std::min<uint64_t>(max, meta.nbytes - req.offset());
  std::string data(n, '\0');
  RETURN_IF_ERROR(grant->reader->Read(
      req.offset(), {reinterpret_cast<uint8_t*>(data.data()), data.size()}));
  resp->set_offset(req.offset());
  resp->set_crc32(Crc32(data));
  resp->set_data(std::move(data));
  return absl::OkStatus();
}

size_t GrantTable::open() const {
  std::lock_guard<std::mutex> lock(mu_);
  return grants_.size();
}

// --- NodeTransfers -----------------------------------------------------------

absl::StatusOr<std::unique_ptr<NodeTransfers>> NodeTransfers::Create(
    core::Runtime* runtime, const NodeTransferOptions& options) {
  if (options.node_token_file.empty()) {
    return absl::InvalidArgumentError("no --node-token-file");
  }
  if (runtime->node_name().empty()) {
    return absl::InvalidArgumentError(
        "moves between nodes need a node name (--node-name)");
  }
  ASSIGN_OR_RETURN(NodeTokens tokens,
                   NodeTokens::FromFile(options.node_token_file));
  RETURN_IF_ERROR(tokens.TokenOf(runtime->node_name()).status());
  ASSIGN_OR_RETURN(
      PeerDirectory peers,
      PeerDirectory::Make(options.peers, options.peer_address_pattern));
  return std::unique_ptr<NodeTransfers>(new NodeTransfers(
      runtime, std::move(tokens), std::move(peers),
      std::clamp<uint32_t>(options.chunk_bytes, 4096, kMaxChunkBytes)));
}

absl::Status NodeTransfers::Grant(const v1::GrantTransferRequest& req,
                                  v1::GrantTransferResponse* resp) {
  RETURN_IF_ERROR(core::CheckNodeName(req.destination_node()));
  if (req.destination_node() == runtime_->node_name()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the destination is this node ('", req.destination_node(),
                     "'): move within a node with To"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<core::Runtime::Reader> reader,
                   runtime_->OpenReader(req.session(), req.handle()));
  core::TensorMeta meta = reader->meta();
  ASSIGN_OR_RETURN(GrantTable::Issued issued,
                   grants_.Issue(std::move(reader), req.destination_node(),
                                 std::chrono::milliseconds(req.ttl_ms())));
  resp->set_grant(std::move(issued.grant));
  resp->set_source_node(runtime_->node_name());
  ToProto(meta, resp->mutable_tensor());
  resp->set_expires_ms(issued.ttl.count());
  return absl::OkStatus();
}

std::shared_ptr<grpc::Channel> NodeTransfers::ChannelTo(
    const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<grpc::Channel>& channel = channels_[address];
  if (channel == nullptr) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(kMaxChunkBytes + (64 << 10));
    channel = grpc::CreateCustomChannel(
        address, grpc::InsecureChannelCredentials(), args);
  }
  return channel;
}

absl::Status NodeTransfers::Import(const v1::ImportRequest& req,
                                   v1::TensorResponse* resp) {
  RETURN_IF_ERROR(runtime_->KeepAlive(req.session()).status());
  ASSIGN_OR_RETURN(const std::string address,
                   peers_.AddressOf(req.source_node()));
  ASSIGN_OR_RETURN(const std::string token,
                   tokens_.TokenOf(runtime_->node_name()));
  RETURN_IF_ERROR(GrantTable::CheckForm(req.grant()));
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Clock::time_point now = Clock::now();
    while (!redeemed_order_.empty() &&
           now - redeemed_order_.front().first > GrantTable::kMaxTtl) {
      auto it = redeemed_.find(redeemed_order_.front().second);
      if (it != redeemed_.end() && it->second == redeemed_order_.front().first)
        redeemed_.erase(it);
      redeemed_order_.pop_front();
    }
    if (!redeemed_.emplace(req.grant(), now).second) {
      return absl::FailedPreconditionError(
          "this grant was already imported here (a grant moves a tensor once)");
    }
    redeemed_order_.emplace_back(now, req.grant());
  }
  // A failed import may be tried again with the same grant.
  bool imported = false;
  struct Unredeem {
    NodeTransfers* self;
    const std::string& grant;
    const bool& imported;
    ~Unredeem() {
      if (imported) return;
      std::lock_guard<std::mutex> lock(self->mu_);
      self->redeemed_.erase(grant);
    }
  } unredeem{this, req.grant(), imported};
  auto stub = v1::NodeService::NewStub(ChannelTo(address));
  const std::string from =
      absl::StrCat("node '", req.source_node(), "' (", address, ")");
  // One chunk, retried on a dropped connection from the same offset.
  // One pull's call: the node's token, a deadline, the chunk at `offset`.
  auto prepare = [&](grpc::ClientContext& ctx, v1::PullChunkRequest& pull,
                     uint64_t offset) {
    ctx.AddMetadata("authorization", "Bearer " + token);
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(30));
    pull.set_grant(req.grant());
    pull.set_offset(offset);
    pull.set_max_bytes(chunk_bytes_);
  };
  auto pull = [&](uint64_t offset, bool finish,
                  v1::PullChunkResponse* chunk) -> absl::Status {
    grpc::Status status;
    for (int attempt = 0; attempt < kPullAttempts; ++attempt) {
      if (attempt > 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50 << attempt));
      }
      grpc::ClientContext ctx;
      v1::PullChunkRequest pull_req;
      prepare(ctx, pull_req, offset);
      pull_req.set_finish(finish);
      chunk->Clear();
      status = stub->PullChunk(&ctx, pull_req, chunk);
      if (status.ok()) {
        if (!finish && (chunk->offset() != offset ||
                        Crc32(chunk->data()) != chunk->crc32())) {
          status = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                "a chunk arrived damaged (offset or CRC-32)");
          continue;
        }
        return absl::OkStatus();
      }
      if (status.error_code() != grpc::StatusCode::UNAVAILABLE &&
          status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
        break;
      }
    }
    const absl::Status s(static_cast<absl::StatusCode>(status.error_code()),
                         status.error_message());
    const absl::StatusCode code =
        s.code() == absl::StatusCode::kDeadlineExceeded
            ? absl::StatusCode::kUnavailable
            : s.code();
    return absl::Status(
        code, absl::StrCat("importing from ", from, ": ", s.message()));
  };
  v1::PullChunkResponse chunk;
  RETURN_IF_ERROR(pull(0, false, &chunk));
  const v1::TensorInfo info = chunk.tensor();
  ASSIGN_OR_RETURN(core::DType dtype, wire::FromProto(info.dtype()));
  const std::vector<int64_t> dims(info.shape().begin(), info.shape().end());
  ASSIGN_OR_RETURN(std::unique_ptr<core::Runtime::Upload> upload,
                   runtime_->BeginUpload(req.session(), req.device(), dtype,
                                         dims, req.tag()));
  if (upload->expected_bytes() != info.nbytes()) {
    return absl::DataLossError(absl::StrCat(
        "importing from ", from, ": the source says ", info.nbytes(),
        " bytes for a tensor of ", upload->expected_bytes()));
  }
  // The pulls ahead, taken in order. One that failed or came back wrong
  // (a dropped connection) is pulled again by `pull`, which retries, and
  // the window starts over after it.
  struct Ahead {
    grpc::ClientContext ctx;
    v1::PullChunkRequest req;
    v1::PullChunkResponse resp;
    std::promise<grpc::Status> promise;
    std::future<grpc::Status> done = promise.get_future();
  };
  std::deque<std::unique_ptr<Ahead>> ahead;
  auto drain = [&ahead] {
    for (auto& a : ahead) a->ctx.TryCancel();
    for (auto& a : ahead) a->done.wait();
    ahead.clear();
  };
  struct DrainAtExit {
    decltype(drain)& then;
    ~DrainAtExit() { then(); }
  } drain_at_exit{drain};
  uint64_t next = chunk.data().size();  // the next offset to ask for
  auto fill = [&] {
    while (ahead.size() < kPullWindow && next < info.nbytes()) {
      auto a = std::make_unique<Ahead>();
      prepare(a->ctx, a->req, next);
      Ahead* raw = a.get();
      stub->async()->PullChunk(&raw->ctx, &raw->req, &raw->resp,
                               [raw](grpc::Status status) {
                                 raw->promise.set_value(std::move(status));
                               });
      next += chunk_bytes_;  // the source serves min(chunk_bytes_, rest)
      ahead.push_back(std::move(a));
    }
  };
  while (true) {
    const std::string& data = chunk.data();
    RETURN_IF_ERROR(upload->Append(
        {reinterpret_cast<const uint8_t*>(data.data()), data.size()}));
    const uint64_t at = upload->received_bytes();
    if (at >= upload->expected_bytes()) break;
    if (data.empty()) {
      return absl::DataLossError(
          absl::StrCat("importing from ", from, ": an empty chunk at ", at));
    }
    fill();
    std::unique_ptr<Ahead> a = std::move(ahead.front());
    ahead.pop_front();
    const grpc::Status status = a->done.get();
    if (status.ok() && a->resp.offset() == at && !a->resp.data().empty() &&
        Crc32(a->resp.data()) == a->resp.crc32()) {
      chunk = std::move(a->resp);
    } else {
      drain();
      RETURN_IF_ERROR(pull(at, false, &chunk));
      next = at + chunk.data().size();
    }
  }
  ASSIGN_OR_RETURN(core::TensorMeta meta, upload->Finish());
  imported = true;
  // The source may let go; a failure here only leaves it to the deadline.
  (void)pull(meta.nbytes, true, &chunk);
  ToProto(meta, resp->mutable_tensor());
  return absl::OkStatus();
}

absl::Status NodeTransfers::Pull(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
    const v1::PullChunkRequest& req, v1::PullChunkResponse* resp) {
  ASSIGN_OR_RETURN(const std::string caller, tokens_.Authenticate(metadata));
  return grants_.Pull(req, caller, resp);
}

grpc::ServerUnaryReactor* NodeServiceImpl::PullChunk(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw_req,
    grpc::ByteBuffer* raw_resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  v1::PullChunkRequest req;
  v1::PullChunkResponse resp;
  absl::Status status = ParseRequest(*raw_req, &req);
  if (status.ok())
    status = transfers_->Pull(ctx->client_metadata(), req, &resp);
  if (status.ok()) status = SerializeReply(resp, raw_resp);
  if (refusals_ != nullptr) {
    refusals_->Note(status, ctx->peer(), /*session=*/"", "PullChunk");
  }
  reactor->Finish(FinishRpc("PullChunk", 0, status));
  return reactor;
}

}  // namespace tensord::server
