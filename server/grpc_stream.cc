#include "server/grpc_stream.h"

#include <google/protobuf/descriptor.h>

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/error_kind.h"
#include "core/base/status.h"
#include "server/grpc_rpc.h"
#include "server/grpc_status.h"

namespace tensord::server {
namespace {

// A command's name for messages and logs: "create", "to", "run matmul",
// "read", ...
std::string CommandName(const v1::Command& cmd) {
  const google::protobuf::FieldDescriptor* kind =
      v1::Command::descriptor()->FindFieldByNumber(cmd.kind_case());
  if (kind == nullptr) return "empty command";
  std::string name(kind->name());
  if (cmd.has_run()) {
    const google::protobuf::FieldDescriptor* op =
        v1::Op::descriptor()->FindFieldByNumber(cmd.run().op().kind_case());
    if (op != nullptr) absl::StrAppend(&name, " ", op->name());
  }
  return name;
}

// Commands that run, and whose failure stops nothing, after a failure.
bool RunsAfterAFailure(const v1::Command& cmd) {
  return cmd.has_release() || cmd.has_sync() || cmd.has_clear_error();
}

// core::ErrorKind's values are the wire's (tensord.v1.ErrorKind).
static_assert(
    static_cast<int>(core::ErrorKind::kRuntimeError) == v1::RUNTIME_ERROR &&
    static_cast<int>(core::ErrorKind::kIndexError) == v1::INDEX_ERROR &&
    static_cast<int>(core::ErrorKind::kValueError) == v1::VALUE_ERROR &&
    static_cast<int>(core::ErrorKind::kTypeError) == v1::TYPE_ERROR);

v1::ErrorKind ErrorKindOf(const absl::Status& status) {
  return static_cast<v1::ErrorKind>(core::ErrorKindOf(status));
}

v1::CommandReply Reply(uint64_t seq, const absl::Status& status) {
  v1::CommandReply reply;
  reply.set_seq(seq);
  reply.set_code(static_cast<int32_t>(ToGrpcCode(status.code())));
  reply.set_message(std::string(status.message()));
  reply.set_error_kind(ErrorKindOf(status));
  return reply;
}

// Replies a client may wait on without reading before the server stops
// reading its commands (flow control).
constexpr int kMaxUnsentReplies = 4096;

}  // namespace

// One connection of a session's command stream: reads StreamRequest
// messages, runs their commands through the session's StreamLog on the
// thread that read them (so commands run in order, one message at a time),
// and writes their replies, coalesced, one StreamResponse at a time.
class StreamReactor final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  StreamReactor(StreamService* service, grpc::CallbackServerContext* ctx)
      : service_(service), ctx_(ctx), scope_(service, ctx, "Stream") {
    // The instance up front too (with the first reply): a reconnecting
    // client learns at once that the server restarted.
    ctx->AddInitialMetadata(kInstanceMetadataKey, service_->instance_id());
    const absl::Status serving = service_->CheckServing(ctx);
    if (!serving.ok()) {
      End(serving);
      return;
    }
    absl::MutexLock lock(&mu_);
    reading_ = true;
    StartRead(&in_);
  }

  // `reading_` stays set until the message is handled: OnWriteDone must not
  // start the next read into `in_` meanwhile.
  void OnReadDone(bool ok) override {
    if (!ok) {  // the client half-closed, or the call ended
      absl::MutexLock lock(&mu_);
      reading_ = false;
      reads_done_ = true;
      EndLocked(absl::OkStatus());
      return;
    }
    {
      absl::MutexLock lock(&mu_);
      if (ending_) {  // sent after the stream ended: dropped unread
        in_.Clear();
        reading_ = false;
        ReadIfRoomLocked();
        return;
      }
    }
    v1::StreamResponse out;
    const absl::Status status = Handle(&out);
    in_.Clear();
    absl::MutexLock lock(&mu_);
    reading_ = false;
    if (out.has_opened() || out.replies_size() != 0) Queue(std::move(out));
    if (!status.ok()) {
      EndLocked(status);
      return;
    }
    ReadIfRoomLocked();
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {  // the call broke: nothing more can be sent
      pending_.Clear();
      has_pending_ = false;
      unsent_ = 0;
      if (!ending_) {
        ending_ = true;
        end_status_ = absl::CancelledError("the client went away");
      }
      WriteOrFinishLocked();  // finishes: nothing is pending
      return;
    }
    WriteOrFinishLocked();
    ReadIfRoomLocked();
  }

  void OnDone() override {
    if (log_ != nullptr) log_->Detach(this);
    delete this;
  }

  // Ends the stream with `status` once the replies queued so far are sent.
  // Any thread; the first call decides the status.
  void End(absl::Status status) {
    absl::MutexLock lock(&mu_);
    EndLocked(std::move(status));
  }

 private:
  // Parses the message in `in_`, attaches to the session's log on the
  // first one, and runs the commands; replies go into `out`.
  absl::Status Handle(v1::StreamResponse* out) {
    v1::StreamRequest request;
    RETURN_IF_ERROR(ParseRequest(in_, &request));
    ++messages_;
    if (log_ == nullptr) {
      if (!request.has_open() || request.open().session().empty()) {
        return absl::InvalidArgumentError(
            "the first Stream message must carry `open` naming the session");
      }
      session_ = request.open().session();
      scope_.set_session(session_);
      ASSIGN_OR_RETURN(
          log_, service_->stream_logs().For(service_->runtime(), session_,
                                            request.open().stream()));
      RETURN_IF_ERROR(log_->Attach(this, request.received_through(), out));
    } else if (request.has_open()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Stream message #", messages_,
          " carries `open`: only the first message may"));
    }
    if (service_->draining()) {
      return absl::UnavailableError("server is shutting down");
    }
    if (request.commands_size() > static_cast<int>(kMaxStreamCommands)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Stream message #", messages_, " carries ",
          request.commands_size(), " commands; at most ", kMaxStreamCommands,
          " per message (Limits.max_stream_commands)"));
    }
    // The message pins the session while its commands run (and renews the
    // lease at both ends); between messages it does not.
    ASSIGN_OR_RETURN(std::unique_ptr<core::Runtime::CallScope> call,
                     service_->runtime().BeginCall(session_));
    return log_->Run(
        this, request, kMaxStreamUnacknowledged,
        [this](const v1::Command& cmd, const absl::Status* refused) {
          return RunCommand(cmd, refused);
        },
        out);
  }

  // Runs one command as the unary RPC of its request would; a failure
  // becomes the reply's code and message (mapped and logged once).
  // A refused command (`refused` set) only has its release list honoured.
  v1::CommandReply RunCommand(const v1::Command& cmd,
                              const absl::Status* refused) {
    if (refused != nullptr) {
      ReleaseListedOf(cmd);
      return Reply(cmd.seq(), *refused);
    }
    v1::CommandReply reply;
    reply.set_seq(cmd.seq());
    const absl::Status status = Execute(cmd, &reply);
    if (status.ok()) return reply;
    const std::string method = "Stream/" + CommandName(cmd);
    const grpc::Status mapped =
        FinishRpc(method, scope_.request_id(), status);
    service_->refusal_log()->Note(status, ctx_->peer(), session_, method);
    reply.Clear();
    reply.set_seq(cmd.seq());
    reply.set_code(mapped.error_code());
    reply.set_message(mapped.error_message());
    reply.set_error_kind(ErrorKindOf(status));
    return reply;
  }

  // The release list of `cmd`'s request, whatever else becomes of it.
  void ReleaseListedOf(const v1::Command& cmd) {
    StreamService& s = *service_;
    auto in_session = [&](auto req) {
      req.set_session(session_);
      (void)s.ReleaseListedOf(req);
    };
    if (cmd.has_create()) in_session(cmd.create());
    if (cmd.has_to()) in_session(cmd.to());
    if (cmd.has_run()) in_session(cmd.run());
    if (cmd.has_execute()) (void)s.ReleaseListedOf(ListedOnly(cmd.execute()));
    if (cmd.has_run_program()) {
      (void)s.ReleaseListedOf(ListedOnly(cmd.run_program()));
    }
    if (cmd.has_collective()) {
      (void)s.ReleaseListedOf(ListedOnly(cmd.collective()));
    }
  }

  absl::Status Execute(const v1::Command& cmd, v1::CommandReply* reply) {
    StreamService& s = *service_;
    switch (cmd.kind_case()) {
      case v1::Command::kCreate: {
        v1::CreateRequest req = cmd.create();
        req.set_session(session_);
        RETURN_IF_ERROR(s.ReleaseListedOf(req));
        v1::TensorResponse resp;
        RETURN_IF_ERROR(s.CreateCommand(ctx_, req, &resp));
        return Name(cmd.result(), resp.tensor(), reply);
      }
      case v1::Command::kTo: {
        v1::ToRequest req = cmd.to();
        req.set_session(session_);
        if (cmd.result() != 0) req.set_copy(true);  // a new tensor to name
        RETURN_IF_ERROR(s.ReleaseListedOf(req));
        v1::TensorResponse resp;
        RETURN_IF_ERROR(s.ToCommand(ctx_, req, &resp));
        return Name(cmd.result(), resp.tensor(), reply);
      }
      case v1::Command::kRun: {
        v1::RunRequest req = cmd.run();
        req.set_session(session_);
        RETURN_IF_ERROR(s.ReleaseListedOf(req));
        if (req.op().has_in_place() && cmd.result() != 0) {
          return absl::InvalidArgumentError(
              "an in-place op's result is its target: leave `result` 0");
        }
        v1::TensorResponse resp;
        RETURN_IF_ERROR(s.RunCommand(ctx_, req, &resp));
        return Name(cmd.result(), resp.tensor(), reply);
      }
      case v1::Command::kExecute:
        return KeptListCommand<v1::ExecuteResponse>(
            cmd, "an execute", cmd.execute(),
            [&](v1::ExecuteResponse* resp) {
              return s.ExecuteCommand(ctx_, session_, cmd.execute(), resp);
            },
            reply);
      case v1::Command::kRunProgram:
        return KeptListCommand<v1::RunProgramResponse>(
            cmd, "a run_program", cmd.run_program(),
            [&](v1::RunProgramResponse* resp) {
              return s.RunProgramCommand(ctx_, session_, cmd.run_program(),
                                         resp);
            },
            reply);
      case v1::Command::kCollective:
        return KeptListCommand<v1::CollectiveResponse>(
            cmd, "a collective", cmd.collective(),
            [&](v1::CollectiveResponse* resp) {
              return s.CollectiveCommand(ctx_, session_, cmd.collective(),
                                         resp);
            },
            reply);
      case v1::Command::kRead: {
        v1::ReadRequest req = cmd.read();
        req.set_session(session_);
        return s.ReadCommand(ctx_, req, reply->mutable_chunk());
      }
      case v1::Command::kRelease: {
        v1::ReleaseRequest req = cmd.release();
        req.set_session(session_);
        RETURN_IF_ERROR(s.ReleaseListedOf(req));
        v1::ReleaseResponse resp;
        return s.ReleaseCommand(ctx_, req, &resp);
      }
      case v1::Command::kSync:
        return absl::OkStatus();
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "command ", cmd.seq(),
            " names nothing to do (create, to, run, execute, run_program, "
            "collective, read, release, sync or clear_error)"));
    }
  }

  // An execute, run_program or collective command (`what`, for the
  // message): `req`'s
  // release list honoured, then `run` fills the response whose kept
  // results (under the server's handles) go in `reply`.
  template <typename Resp, typename Req, typename Run>
  absl::Status KeptListCommand(const v1::Command& cmd, const char* what,
                               const Req& req, Run run,
                               v1::CommandReply* reply) {
    if (cmd.result() != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what,
                       "'s results are its kept list, under the server's "
                       "handles: leave `result` 0"));
    }
    RETURN_IF_ERROR(service_->ReleaseListedOf(ListedOnly(req)));
    Resp resp;
    RETURN_IF_ERROR(run(&resp));
    reply->mutable_kept()->Swap(KeptOf(resp));
    return absl::OkStatus();
  }

  // The results a kept-list command's response carries.
  template <typename Resp>
  static auto* KeptOf(Resp& resp) {
    return resp.mutable_kept();
  }
  static auto* KeptOf(v1::CollectiveResponse& resp) {
    return resp.mutable_tensors();
  }

  // A request of `req`'s type with its release list only (not its ops or
  // inputs), in the stream's session.
  template <typename Req>
  Req ListedOnly(const Req& req) const {
    Req listed;
    listed.set_session(session_);
    *listed.mutable_release() = req.release();
    return listed;
  }

  // Gives the new tensor `info` the client's handle `result` (0: keep the
  // server's) and puts it in `reply`. On failure the tensor is released.
  absl::Status Name(uint64_t result, const v1::TensorInfo& info,
                    v1::CommandReply* reply) {
    *reply->mutable_tensor() = info;
    if (result == 0 || result == info.handle()) return absl::OkStatus();
    const absl::Status renamed =
        service_->runtime().RenameHandle(session_, info.handle(), result);
    if (!renamed.ok()) {
      (void)service_->runtime().Release(session_, info.handle());
      return renamed;
    }
    reply->mutable_tensor()->set_handle(result);
    return absl::OkStatus();
  }

  // Adds `out` to what is waiting to be sent and sends it if no write is
  // in flight.
  void Queue(v1::StreamResponse out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    unsent_ += out.replies_size();
    if (out.has_opened()) *pending_.mutable_opened() = out.opened();
    for (v1::CommandReply& r : *out.mutable_replies()) {
      *pending_.add_replies() = std::move(r);
    }
    has_pending_ = true;
    WriteOrFinishLocked();
  }

  void EndLocked(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ending_) return;
    ending_ = true;
    end_status_ = std::move(status);
    ReadIfRoomLocked();
    WriteOrFinishLocked();
  }

  // Starts the next write, or finishes once ending with nothing left.
  // gRPC never runs a reaction inline from StartWrite or Finish, so they
  // may be called with mu_ held.
  void WriteOrFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_) return;
    if (has_pending_) {
      out_.Clear();  // the last write's bytes
      const absl::Status serialized = SerializeReply(pending_, &out_);
      pending_.Clear();
      has_pending_ = false;
      unsent_ = 0;
      if (serialized.ok()) {
        writing_ = true;
        StartWrite(&out_);
        return;
      }
      if (!ending_) {
        ending_ = true;
        end_status_ = serialized;
      }
    }
    if (ending_) {
      finished_ = true;
      Finish(scope_.Finish(end_status_));
    }
  }

  // Reads the next message unless the client is not taking its replies
  // (then OnWriteDone reads it). Once the stream is ending, a read stays
  // pending until the call ends and drops what the client still sends:
  // gRPC's in-process transport otherwise fails the last replies' write
  // and never delivers the status (the client waits for its deadline).
  void ReadIfRoomLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (reading_ || reads_done_ || finished_) return;
    if (!ending_ && unsent_ >= kMaxUnsentReplies) return;
    reading_ = true;
    StartRead(&in_);
  }

  StreamService* service_;            // borrowed
  grpc::CallbackServerContext* ctx_;  // owned by gRPC
  RpcScope scope_;
  // Touched only by the reading thread (one read at a time).
  grpc::ByteBuffer in_;
  int64_t messages_ = 0;
  std::string session_;
  std::shared_ptr<StreamLog> log_;

  absl::Mutex mu_;
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;  // the client half-closed
  bool ending_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status end_status_ ABSL_GUARDED_BY(mu_);
  v1::StreamResponse pending_ ABSL_GUARDED_BY(mu_);
  bool has_pending_ ABSL_GUARDED_BY(mu_) = false;
  int unsent_ ABSL_GUARDED_BY(mu_) = 0;  // replies in pending_
  grpc::ByteBuffer out_ ABSL_GUARDED_BY(mu_);  // the write in flight
};

// --- StreamLog ---------------------------------------------------------------

absl::Status StreamLog::Attach(StreamReactor* connection,
                               uint64_t received_through,
                               v1::StreamResponse* opened) {
  absl::MutexLock lock(&mu_);
  if (ended_) return end_status_;
  if (attached_ != nullptr && attached_ != connection) {
    attached_->End(absl::AbortedError(
        "another connection took over this stream"));
  }
  attached_ = connection;
  Trim(received_through);
  opened->mutable_opened()->set_executed_through(executed_through_);
  if (failed_.has_value()) opened->mutable_opened()->set_failed_seq(failed_->seq);
  for (const v1::CommandReply& r : kept_) *opened->add_replies() = r;
  return absl::OkStatus();
}

void StreamLog::Detach(StreamReactor* connection) {
  absl::MutexLock lock(&mu_);
  if (attached_ == connection) attached_ = nullptr;
}

absl::Status StreamLog::Run(StreamReactor* connection,
                            const v1::StreamRequest& request,
                            uint32_t max_unacknowledged, const RunCommand& run,
                            v1::StreamResponse* out) {
  absl::MutexLock lock(&mu_);
  if (ended_) return end_status_;
  if (attached_ != connection) {
    return absl::AbortedError(
        "another connection took over this stream");
  }
  Trim(request.received_through());
  for (const v1::Command& cmd : request.commands()) {
    if (cmd.seq() != 0 && cmd.seq() <= executed_through_) continue;  // done
    if (cmd.seq() != executed_through_ + 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "command seq ", cmd.seq(), " follows ", executed_through_,
          ": each command's seq is one more than the one before it (the "
          "session's first is 1)"));
    }
    if (kept_.size() >= max_unacknowledged) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "this session's stream keeps ", kept_.size(),
          " replies the client has not acknowledged, the most it keeps "
          "(Limits.max_stream_unacknowledged): send `received_through`"));
    }
    v1::CommandReply reply;
    if (cmd.has_clear_error()) {
      if (failed_.has_value() && cmd.clear_error().seq() != failed_->seq) {
        reply = Reply(cmd.seq(),
                      absl::InvalidArgumentError(absl::StrCat(
                          "clear_error names command ", cmd.clear_error().seq(),
                          " but the stream stopped at command ", failed_->seq)));
      } else {
        failed_.reset();
        reply.set_seq(cmd.seq());
      }
    } else if (failed_.has_value() && !RunsAfterAFailure(cmd)) {
      const absl::Status refused = absl::FailedPreconditionError(absl::StrCat(
          "not run: command ", failed_->seq, " (", failed_->what,
          ") failed: ", failed_->why, "; send clear_error for it first"));
      reply = run(cmd, &refused);
    } else {
      reply = run(cmd, nullptr);
      if (reply.code() != 0 && !RunsAfterAFailure(cmd)) {
        failed_ = Failure{cmd.seq(), CommandName(cmd),
                          absl::StrCat(absl::StatusCodeToString(
                                           static_cast<absl::StatusCode>(
                                               reply.code())),
                                       ": ", reply.message())};
      }
    }
    executed_through_ = cmd.seq();
    kept_.push_back(reply);
    *out->add_replies() = std::move(reply);
  }
  return absl::OkStatus();
}

void StreamLog::Trim(uint64_t received_through) {
  while (!kept_.empty() && kept_.front().seq() <= received_through) {
    kept_.pop_front();
  }
}

void StreamLog::EndConnection(const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  if (attached_ != nullptr) attached_->End(why);
}

void StreamLog::OnSessionEnded(const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  ended_ = true;
  ended_flag_.store(true);
  end_status_ = why;
  kept_.clear();
  if (attached_ != nullptr) attached_->End(why);
}


// --- StreamLogs --------------------------------------------------------------

absl::StatusOr<std::shared_ptr<StreamLog>> StreamLogs::For(
    core::Runtime& runtime, const std::string& session, uint64_t stream) {
  const std::string key = absl::StrCat(session, "/", stream);
  absl::MutexLock lock(&mu_);
  for (auto it = logs_.begin(); it != logs_.end();) {
    if (it->second->ended()) {
      logs_.erase(it++);
    } else {
      ++it;
    }
  }
  if (auto it = logs_.find(key); it != logs_.end()) return it->second;
  auto log = std::make_shared<StreamLog>();
  RETURN_IF_ERROR(runtime.BindToSession(session, log));
  logs_.emplace(key, log);
  return log;
}

void StreamLogs::EndAll(const absl::Status& why) {
  std::vector<std::shared_ptr<StreamLog>> logs;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, log] : logs_) logs.push_back(log);
  }
  for (const auto& log : logs) log->EndConnection(why);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* NewStreamReactor(
    StreamService* service, grpc::CallbackServerContext* ctx) {
  return new StreamReactor(service, ctx);
}

}  // namespace tensord::server
