// Moves between nodes (issue 13): a tensor goes from one tensord's device to
// another's without crossing the client (the proto's "Moves between nodes").
//
//   NodeTokens     who a node-to-node caller is: --node-token-file, lines
//                  "NAME TOKEN"; bearer tokens compared in constant time.
//   PeerDirectory  where a node is: --peers NAME=ADDRESS,... or
//                  --peer-address-pattern "{node}.tensord-peers:50051";
//                  never an address a request supplies.
//   GrantTable     the source side: one-time, deadline-bound grants of one
//                  tensor (a Runtime::Reader snapshot) to one node.
//   NodeTransfers  the three together, plus the destination side (Import:
//                  pull the chunks from the source into an Upload) and the
//                  source side's NodeService (PullChunk).
//
// Thread-safety: every class here is thread-safe.
#ifndef TENSORD_SERVER_NODE_TRANSFERS_H_
#define TENSORD_SERVER_NODE_TRANSFERS_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/runtime/runtime.h"
#include "server/refusal_log.h"
#include "tensord/v1/tensord.grpc.pb.h"

namespace tensord::server {

// Node identities for node-to-node calls.
class NodeTokens {
 public:
  // INVALID_ARGUMENT naming the file and line for a bad file: each line
  // "NAME TOKEN" (a node name, whitespace, a token of 16+ printable
  // bytes); blank lines and '#' comments ignored; names and tokens unique.
  static absl::StatusOr<NodeTokens> FromFile(const std::string& path);
  static absl::StatusOr<NodeTokens> FromText(std::string_view text,
                                             std::string_view where);

  // The node whose token `metadata` carries as "authorization: Bearer
  // <token>"; UNAUTHENTICATED otherwise (a client's token included).
  absl::StatusOr<std::string> Authenticate(
      const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) const;
  // The token node `name` presents; NOT_FOUND when the file has none.
  absl::StatusOr<std::string> TokenOf(std::string_view name) const;

 private:
  using Digest = std::array<unsigned char, 32>;
  std::map<std::string, std::string> tokens_;          // name -> token
  std::vector<std::pair<Digest, std::string>> digests_;  // -> name
};

// Where each peer node listens.
class PeerDirectory {
 public:
  // `peers`: "NAME=ADDRESS,..." (may be empty); `pattern`: an address with
  // "{node}" where the node's name goes (may be empty). INVALID_ARGUMENT
  // for a malformed list or a pattern without {node}.
  static absl::StatusOr<PeerDirectory> Make(std::string_view peers,
                                            std::string_view pattern);
  // The listed address, else the pattern's; NOT_FOUND naming the node when
  // neither (INVALID_ARGUMENT for a malformed name).
  absl::StatusOr<std::string> AddressOf(std::string_view node) const;

 private:
  std::map<std::string, std::string, std::less<>> listed_;
  std::string pattern_;
};

// The source side's open grants.
class GrantTable {
 public:
  static constexpr size_t kMaxGrants = 1024;
  static constexpr std::chrono::milliseconds kDefaultTtl{60'000};
  static constexpr std::chrono::milliseconds kMaxTtl{600'000};
  // A grant is 32 hex digits; a request's grant field longer than this is
  // INVALID_ARGUMENT.
  static constexpr size_t kMaxGrantBytes = 64;
  // The form check both ends make (Pull before its lookup, Import after
  // resolving its source): INVALID_ARGUMENT for an empty grant or one over
  // kMaxGrantBytes, naming its size.
  static absl::Status CheckForm(std::string_view grant);

  struct Issued {
    std::string grant;
    std::chrono::milliseconds ttl{0};
  };
  // A grant of what `reader` reads to node `destination`.
  // RESOURCE_EXHAUSTED past kMaxGrants open; INVALID_ARGUMENT for a ttl
  // below 0 or above kMaxTtl.
  absl::StatusOr<Issued> Issue(std::unique_ptr<core::Runtime::Reader> reader,
                               std::string destination,
                               std::chrono::milliseconds ttl);
  // Serves the chunk at `offset` to node `caller`, or ends the grant
  // (`finish`). INVALID_ARGUMENT for a grant CheckForm refuses;
  // NOT_FOUND for an unknown, finished or expired grant;
  // PERMISSION_DENIED when `caller` is not the destination; OUT_OF_RANGE
  // for an offset past the end.
  absl::Status Pull(const v1::PullChunkRequest& req, std::string_view caller,
                    v1::PullChunkResponse* resp);
  size_t open() const;

 private:
  struct Grant {
    std::string destination;
    std::chrono::steady_clock::time_point deadline;
    std::mutex mu;  // one read at a time
    std::unique_ptr<core::Runtime::Reader> reader;
  };
  void DropExpired(std::chrono::steady_clock::time_point now);
  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Grant>> grants_;
};

struct NodeTransferOptions {
  std::string node_token_file;      // "" = moves between nodes are off
  std::string peers;                // NAME=ADDRESS,...
  std::string peer_address_pattern;  // e.g. "{node}.tensord-peers:50051"
  uint32_t chunk_bytes = 1 << 20;   // what Import asks each pull for
};

class NodeTransfers {
 public:
  static absl::StatusOr<std::unique_ptr<NodeTransfers>> Create(
      core::Runtime* runtime, const NodeTransferOptions& options);

  // TensorService.GrantTransfer and .Import (codes as the proto says).
  absl::Status Grant(const v1::GrantTransferRequest& req,
                     v1::GrantTransferResponse* resp);
  absl::Status Import(const v1::ImportRequest& req, v1::TensorResponse* resp);
  // NodeService.PullChunk, after authenticating the caller as a node.
  absl::Status Pull(
      const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
      const v1::PullChunkRequest& req, v1::PullChunkResponse* resp);

 private:
  NodeTransfers(core::Runtime* runtime, NodeTokens tokens, PeerDirectory peers,
                uint32_t chunk_bytes)
      : runtime_(runtime),
        tokens_(std::move(tokens)),
        peers_(std::move(peers)),
        chunk_bytes_(chunk_bytes) {}
  std::shared_ptr<grpc::Channel> ChannelTo(const std::string& address);

  core::Runtime* const runtime_;
  const NodeTokens tokens_;
  const PeerDirectory peers_;
  const uint32_t chunk_bytes_;
  GrantTable grants_;
  std::mutex mu_;
  // Grants this node has redeemed (or is redeeming): each once. A grant
  // cannot outlive GrantTable::kMaxTtl at its source, so entries older than
  // that are forgotten (a replay then fails at the source, NOT_FOUND):
  // `redeemed_order_` holds them oldest first.
  absl::flat_hash_map<std::string, std::chrono::steady_clock::time_point>
      redeemed_;
  std::deque<std::pair<std::chrono::steady_clock::time_point, std::string>>
      redeemed_order_;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_;
};

// NodeService over NodeTransfers (callback API).
// Raw like TensorService's handlers: the server parses the request itself,
// so malformed bytes are INVALID_ARGUMENT naming the problem (gRPC's own
// parse would answer UNIMPLEMENTED with no message, before authentication
// and unlogged).
class NodeServiceImpl final
    : public v1::NodeService::WithRawCallbackMethod_PullChunk<
          v1::NodeService::Service> {
 public:
  // `transfers` and `refusals` (where a refused pull is counted and
  // logged; nullptr: nowhere) are borrowed and outlive the service.
  NodeServiceImpl(NodeTransfers* transfers, RefusalLog* refusals)
      : transfers_(transfers), refusals_(refusals) {}
  grpc::ServerUnaryReactor* PullChunk(grpc::CallbackServerContext* ctx,
                                      const grpc::ByteBuffer* raw_req,
                                      grpc::ByteBuffer* raw_resp) override;

 private:
  NodeTransfers* const transfers_;
  RefusalLog* const refusals_;
};

}  // namespace tensord::server

#endif  // TENSORD_SERVER_NODE_TRANSFERS_H_
