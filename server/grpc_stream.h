// The session's ordered command stream (tensord.proto: "The session's
// ordered command stream"): a client's creates, moves, ops, small reads
// and releases, run in order, exactly once, answered asynchronously.
//
// A session may have several streams (one per attached client, each named
// by the id its client chose). A StreamLog is what one stream keeps across
// connections: the
// highest seq it has run, the failed command that stopped it, the replies
// the client has not acknowledged and the connection (StreamReactor, in
// grpc_stream.cc) that runs its commands now. StreamLogs finds a session's
// log, making it the first time; a log ends with its session (it is tied
// to it: SessionBound), ending the connection attached to it.
//
// Thread-safety: StreamLogs and StreamLog are thread-safe. A log's mutex
// is taken before the attached connection's own, never after.
#ifndef TENSORD_SERVER_GRPC_STREAM_H_
#define TENSORD_SERVER_GRPC_STREAM_H_

#include <grpcpp/server_context.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/server_callback.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/runtime/runtime.h"
#include "core/runtime/session_bound.h"
#include "server/grpc_rpc.h"
#include "server/refusal_log.h"
#include "tensord/v1/tensord.pb.h"

namespace tensord::server {

// Commands in one StreamRequest, and replies a session's stream keeps for
// a client that has not acknowledged them (Limits.max_stream_commands,
// max_stream_unacknowledged).
inline constexpr uint32_t kMaxStreamCommands = 1024;
inline constexpr uint32_t kMaxStreamUnacknowledged = 16384;

class StreamReactor;

class StreamLog final : public core::SessionBound {
 public:
  // Makes `connection` the one that runs the session's commands, ending
  // the one before it (ABORTED: another stream took over). Fills `opened`
  // with where the log stands and the kept replies after
  // `received_through`. NOT_FOUND once the session has ended.
  absl::Status Attach(StreamReactor* connection, uint64_t received_through,
                      v1::StreamResponse* opened);
  // Undoes Attach if `connection` is still the attached one.
  void Detach(StreamReactor* connection);

  // Runs the commands of `request` that the log has not run yet, in seq
  // order, through `run` (which executes one command and returns its
  // reply; with `refused` set it only honours the command's release list
  // and returns that refusal), appending each reply to `out`. Commands
  // other than release, sync and clear_error after a failed one are
  // refused, not run.
  // INVALID_ARGUMENT for a seq gap; RESOURCE_EXHAUSTED past
  // `max_unacknowledged` kept replies; ABORTED when `connection` is no
  // longer the attached one.
  using RunCommand = std::function<v1::CommandReply(
      const v1::Command&, const absl::Status* refused)>;
  absl::Status Run(StreamReactor* connection, const v1::StreamRequest& request,
                   uint32_t max_unacknowledged, const RunCommand& run,
                   v1::StreamResponse* out);

  // core::SessionBound: ends the attached connection with `why` and lets
  // the kept replies go.
  void OnSessionEnded(const absl::Status& why) override;
  bool ended() const { return ended_flag_.load(); }
  // Ends the attached connection, if any, with `why` (the log stays).
  void EndConnection(const absl::Status& why);

 private:
  // Forgets the kept replies up to `received_through`.
  void Trim(uint64_t received_through) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> ended_flag_{false};  // ended_, readable without mu_
  absl::Status end_status_ ABSL_GUARDED_BY(mu_);
  uint64_t executed_through_ ABSL_GUARDED_BY(mu_) = 0;
  struct Failure {
    uint64_t seq = 0;
    std::string what;  // the command: "run matmul"
    std::string why;   // "<code>: <message>"
  };
  std::optional<Failure> failed_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::CommandReply> kept_ ABSL_GUARDED_BY(mu_);
  StreamReactor* attached_ ABSL_GUARDED_BY(mu_) = nullptr;  // borrowed
};

class StreamLogs {
 public:
  // The log of stream `stream` of `session`, made and tied to the session
  // the first time (through `runtime`, borrowed). NOT_FOUND for an unknown
  // session. Logs of ended sessions are dropped on the way.
  absl::StatusOr<std::shared_ptr<StreamLog>> For(core::Runtime& runtime,
                                                 const std::string& session,
                                                 uint64_t stream);
  // Ends every attached connection with `why` (the server is draining).
  void EndAll(const absl::Status& why);

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<StreamLog>> logs_
      ABSL_GUARDED_BY(mu_);
};

// What the command stream needs of the service, and all it sees of it
// (server/grpc_service.h's TensorServiceImpl implements it): whether it
// serves a call, the session's command log, and each command's handler —
// the unary RPC's own, on a request the stream has filled with its
// session, after the request's `release` list is honoured.
class StreamService : public RpcHost {
 public:
  // UNAVAILABLE while draining; UNAUTHENTICATED without the credentials.
  virtual absl::Status CheckServing(
      const grpc::CallbackServerContext* ctx) const = 0;
  virtual bool draining() const = 0;
  virtual core::Runtime& runtime() = 0;
  virtual StreamLogs& stream_logs() = 0;
  // Releases what the request's `release` list names (INVALID_ARGUMENT
  // past Limits.max_release_handles, before anything is released).
  virtual absl::Status ReleaseListedOf(const v1::CreateRequest& req) = 0;
  virtual absl::Status ReleaseListedOf(const v1::ToRequest& req) = 0;
  virtual absl::Status ReleaseListedOf(const v1::RunRequest& req) = 0;
  virtual absl::Status ReleaseListedOf(const v1::ReleaseRequest& req) = 0;
  virtual absl::Status ReleaseListedOf(const v1::ExecuteRequest& req) = 0;
  virtual absl::Status ReleaseListedOf(const v1::RunProgramRequest& req) = 0;
  virtual absl::Status ReleaseListedOf(const v1::CollectiveRequest& req) = 0;
  virtual absl::Status CreateCommand(grpc::CallbackServerContext* ctx,
                                     const v1::CreateRequest& req,
                                     v1::TensorResponse* resp) = 0;
  virtual absl::Status ToCommand(grpc::CallbackServerContext* ctx,
                                 const v1::ToRequest& req,
                                 v1::TensorResponse* resp) = 0;
  virtual absl::Status RunCommand(grpc::CallbackServerContext* ctx,
                                  const v1::RunRequest& req,
                                  v1::TensorResponse* resp) = 0;
  // In `session`: the request's own `session` is not read (nor copied).
  virtual absl::Status ExecuteCommand(grpc::CallbackServerContext* ctx,
                                      std::string_view session,
                                      const v1::ExecuteRequest& req,
                                      v1::ExecuteResponse* resp) = 0;
  // In `session`, as ExecuteCommand.
  virtual absl::Status RunProgramCommand(grpc::CallbackServerContext* ctx,
                                         std::string_view session,
                                         const v1::RunProgramRequest& req,
                                         v1::RunProgramResponse* resp) = 0;
  // In `session`, as ExecuteCommand.
  virtual absl::Status CollectiveCommand(grpc::CallbackServerContext* ctx,
                                         std::string_view session,
                                         const v1::CollectiveRequest& req,
                                         v1::CollectiveResponse* resp) = 0;
  virtual absl::Status ReadCommand(grpc::CallbackServerContext* ctx,
                                   const v1::ReadRequest& req,
                                   v1::FetchChunk* resp) = 0;
  virtual absl::Status ReleaseCommand(grpc::CallbackServerContext* ctx,
                                      const v1::ReleaseRequest& req,
                                      v1::ReleaseResponse* resp) = 0;
};

// The Stream RPC's reactor: the session's commands run through `service`
// (borrowed; it outlives every stream).
grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* NewStreamReactor(
    StreamService* service, grpc::CallbackServerContext* ctx);

}  // namespace tensord::server

#endif  // TENSORD_SERVER_GRPC_STREAM_H_
