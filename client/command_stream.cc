#include "client/command_stream.h"

#include <google/protobuf/descriptor.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <random>
#include <utility>

#include "client/grpc_enums.h"

namespace tensord::client::internal {
namespace {

constexpr char kInstanceKey[] = "tensord-instance";
// Reconnection tries in a row (a reply read resets the count), 25 ms before
// the first, doubling up to 1 s: about 3.6 s in all, past gRPC's own
// reconnect backoff (1 s, jittered by 20%), during which a channel whose
// connection attempt failed fails calls at once.
constexpr int kMaxReconnects = 8;
constexpr std::chrono::milliseconds kFirstBackoff{25}, kMaxBackoff{1000};

uint64_t Random64() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

// The server instance `context`'s call reached ("" if it did not say).
std::string InstanceOf(const grpc::ClientContext& context) {
  for (const auto* meta : {&context.GetServerInitialMetadata(),
                           &context.GetServerTrailingMetadata()}) {
    auto it = meta->find(kInstanceKey);
    if (it != meta->end()) return std::string(it->second.data(), it->second.size());
  }
  return "";
}

bool IsRefusal(const v1::CommandReply& reply) {
  return reply.code() == static_cast<int>(StatusCode::FAILED_PRECONDITION) &&
         reply.message().rfind("not run: command ", 0) == 0;
}

}  // namespace

CommandStream::CommandStream(std::shared_ptr<grpc::ChannelInterface> channel,
                             std::string session, std::string instance,
                             Options options)
    : channel_(std::move(channel)),
      stub_(v1::TensorService::NewStub(channel_)),
      session_(std::move(session)),
      instance_(std::move(instance)),
      stream_id_(Random64()),
      options_(options),
      next_handle_((uint64_t{1} << 63) | (Random64() >> 2)) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ConnectLocked();
  }
  writer_ = std::thread([this] { WriterLoop(); });
  reader_ = std::thread([this] { ReaderLoop(); });
}

CommandStream::~CommandStream() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    stopping_ = true;
    if (!broken_.has_value()) {
      broken_ = Error(StatusCode::CANCELLED, "the client is closing");
    }
    cv_.notify_all();
    writer_cv_.notify_all();
    if (context_ != nullptr) context_->TryCancel();
  }
  if (writer_.joinable()) writer_.join();
  if (reader_.joinable()) reader_.join();
}

std::string CommandStream::Describe(const v1::Command& cmd) {
  const google::protobuf::FieldDescriptor* kind =
      v1::Command::descriptor()->FindFieldByNumber(cmd.kind_case());
  std::string what = kind == nullptr ? "command" : std::string(kind->name());
  if (cmd.has_run()) {
    const google::protobuf::FieldDescriptor* op =
        v1::Op::descriptor()->FindFieldByNumber(cmd.run().op().kind_case());
    if (op != nullptr) what.append(" ").append(op->name());
  }
  std::string out = "command ";
  out.append(std::to_string(cmd.seq())).append(" (").append(what);
  if (cmd.result() != 0) {
    out.append(", result ").append(std::to_string(cmd.result()));
  }
  return out.append(")");
}

void CommandStream::ConnectLocked() {
  context_ = std::make_unique<grpc::ClientContext>();
  rw_ = stub_->Stream(context_.get());
  // The writer opens the stream with its next message and sends everything
  // without a reply again (the server skips what it ran and replays its
  // replies); the outbox is the tail of it. The reader goes on reading
  // meanwhile, so replies never back up behind the resend.
  outbox_.assign(in_flight_.begin(), in_flight_.end());
  need_open_ = true;
  writer_cv_.notify_one();
}

uint64_t CommandStream::Send(v1::Command cmd, bool want_reply) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, options_.full_wait, [this] {
        return broken_.has_value() ||
               in_flight_.size() < options_.max_in_flight;
      })) {
    throw Error(StatusCode::RESOURCE_EXHAUSTED,
                std::to_string(in_flight_.size()) +
                    " commands have waited for the server's answers for " +
                    std::to_string(options_.full_wait.count()) +
                    " ms: the most a client keeps in flight on its command "
                    "stream is " +
                    std::to_string(options_.max_in_flight));
  }
  if (broken_.has_value()) throw *broken_;
  const uint64_t seq = ++next_seq_;
  cmd.set_seq(seq);
  if (want_reply) wanted_.emplace(seq, std::nullopt);
  QueueLocked(std::move(cmd));
  // Someone will wait for this one: everything queued goes now.
  if (want_reply) FlushSoonLocked();
  return seq;
}

void CommandStream::QueueLocked(v1::Command cmd) {
  in_flight_.push_back(cmd);
  outbox_.push_back(std::move(cmd));
  if (outbox_.size() == 1) {
    first_queued_ = std::chrono::steady_clock::now();
    writer_cv_.notify_one();  // starts the writer's batching window
  } else if (outbox_.size() == options_.batch_commands) {
    writer_cv_.notify_one();
  }
}

void CommandStream::FlushSoonLocked() {
  if (flush_ || outbox_.empty()) return;
  flush_ = true;
  writer_cv_.notify_one();
}

void CommandStream::WriterLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    auto can_write = [this] {
      return (need_open_ || !outbox_.empty()) && !writing_ && !reconnecting_ &&
             !broken_.has_value();
    };
    writer_cv_.wait(lock, [&] { return stopping_ || can_write(); });
    if (stopping_) return;
    // Nagle for commands: while earlier commands await their replies, more
    // may come right behind these, so wait a moment for them unless a sync
    // point is waiting (flush_), the batch is full, the replies came (Take
    // flushes), or this opens a connection. An idle stream sends at once.
    // Many commands then share one message, one wake-up and one server read.
    const bool awaiting = in_flight_.size() > outbox_.size();
    if (awaiting && !need_open_ && !flush_ &&
        outbox_.size() < options_.batch_commands) {
      writer_cv_.wait_until(
          lock, first_queued_ + options_.batch_delay, [this] {
            return stopping_ || flush_ ||
                   outbox_.size() >= options_.batch_commands;
          });
      if (stopping_) return;
      if (!can_write()) continue;
    }
    flush_ = false;
    v1::StreamRequest request;
    if (need_open_) {
      need_open_ = false;
      request.mutable_open()->set_session(session_);
      request.mutable_open()->set_stream(stream_id_);
    }
    request.set_received_through(received_through_);
    const size_t n =
        std::min(outbox_.size(), static_cast<size_t>(kMaxCommandsPerMessage));
    for (size_t i = 0; i < n; ++i) {
      *request.add_commands() = std::move(outbox_[i]);
    }
    outbox_.erase(outbox_.begin(), outbox_.begin() + n);
    ReaderWriter* rw = rw_.get();
    writing_ = true;
    lock.unlock();
    // A failed write means a broken connection: the reader reconnects and
    // sends everything without a reply again.
    (void)rw->Write(request);
    lock.lock();
    writing_ = false;
    cv_.notify_all();
  }
}

void CommandStream::ReaderLoop() {
  int reconnects = 0;
  for (;;) {
    ReaderWriter* rw;
    {
      std::lock_guard<std::mutex> lock(mu_);
      rw = rw_.get();
    }
    v1::StreamResponse response;
    if (rw->Read(&response)) {
      reconnects = 0;
      Take(response);
      continue;
    }
    std::unique_lock<std::mutex> lock(mu_);
    // No write on this connection from here until the next one is made.
    reconnecting_ = true;
    cv_.wait(lock, [this] { return !writing_; });
    const grpc::Status status = rw_->Finish();
    if (stopping_) break;
    // Another server instance answered: this session's tensors are gone.
    const std::string now = InstanceOf(*context_);
    if (!instance_.empty() && !now.empty() && now != instance_) {
      broken_ = Error(StatusCode::FAILED_PRECONDITION,
                      "server restarted (instance " + instance_ + " → " +
                          now + "): this session's tensors are gone");
      cv_.notify_all();
      break;
    }
    // A dropped connection, or a server going away (it may come back).
    const bool transient = status.error_code() == StatusCode::UNAVAILABLE ||
                           status.error_code() == StatusCode::CANCELLED;
    if (transient && reconnects < kMaxReconnects) {
      lock.unlock();
      std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(
          kFirstBackoff * (1 << reconnects), kMaxBackoff));
      lock.lock();
      ++reconnects;
      if (stopping_) break;
      reconnecting_ = false;
      ConnectLocked();
      continue;
    }
    // Unanswered when no server ended it (its trailers lack the instance):
    // the connection itself failed.
    broken_ = Error(status.ok() ? StatusCode::UNAVAILABLE : status.error_code(),
                    status.ok() ? "the session's command stream ended"
                                : status.error_message(),
                    !status.ok() && now.empty());
    cv_.notify_all();
    break;
  }
}

void CommandStream::Take(const v1::StreamResponse& response) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const v1::CommandReply& reply : response.replies()) {
    if (reply.seq() <= received_through_) continue;  // a replay we hold
    received_through_ = reply.seq();
    v1::Command cmd;
    while (!in_flight_.empty() && in_flight_.front().seq() <= reply.seq()) {
      if (in_flight_.front().seq() == reply.seq()) {
        cmd = std::move(in_flight_.front());
      }
      in_flight_.pop_front();
    }
    if (reply.code() != 0) {
      const StatusCode code = static_cast<StatusCode>(reply.code());
      const ErrorKind kind = internal::FromProto(reply.error_kind());
      // As the server: a failed release, sync or clear_error stops nothing.
      const bool stops = !cmd.has_release() && !cmd.has_sync() &&
                         !cmd.has_clear_error();
      if (stops && !IsRefusal(reply) && !failure_.has_value()) {
        failure_ = Failure{
            reply.seq(),
            Error(code, Describe(cmd) + " failed: " + reply.message(), kind)};
      }
      if (cmd.result() != 0) {
        dead_.emplace(cmd.result(), failure_.has_value()
                                        ? failure_->error
                                        : Error(code, reply.message(), kind));
      }
    }
    auto it = wanted_.find(reply.seq());
    if (it != wanted_.end()) it->second = reply;
  }
  // Every sent command is answered: what is queued need not wait longer.
  if (in_flight_.size() == outbox_.size()) FlushSoonLocked();
  cv_.notify_all();
}

void CommandStream::ThrowFailureLocked(uint64_t seq) {
  if (!failure_.has_value() || failure_->seq > seq) return;
  Error error = failure_->error;
  const uint64_t failed = failure_->seq;
  failure_.reset();
  // Acknowledged: commands run again from here on.
  if (!broken_.has_value()) {
    v1::Command clear;
    clear.set_seq(++next_seq_);
    clear.mutable_clear_error()->set_seq(failed);
    QueueLocked(std::move(clear));
  }
  throw error;
}

v1::CommandReply CommandStream::Wait(uint64_t seq) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!wanted_.contains(seq)) {
    throw Error(StatusCode::INTERNAL,
                "no reply is kept for command " + std::to_string(seq));
  }
  // Looked up again on each wake: other threads' Sends may rehash.
  cv_.wait(lock, [&] {
    return broken_.has_value() || wanted_.find(seq)->second.has_value();
  });
  auto it = wanted_.find(seq);
  if (!it->second.has_value()) {
    wanted_.erase(it);
    throw *broken_;
  }
  v1::CommandReply reply = std::move(*it->second);
  wanted_.erase(it);
  ThrowFailureLocked(seq);
  return reply;
}

void CommandStream::Drain() {
  uint64_t last = 0;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (in_flight_.empty()) {
      ThrowFailureLocked(next_seq_);
      return;
    }
    FlushSoonLocked();
    last = next_seq_;
    cv_.wait(lock, [&] {
      return broken_.has_value() || received_through_ >= last;
    });
    if (received_through_ < last) throw *broken_;
    ThrowFailureLocked(last);
  }
}

uint64_t CommandStream::NewHandle() {
  std::lock_guard<std::mutex> lock(mu_);
  return next_handle_++;
}

void CommandStream::ThrowPendingFailure() {
  std::lock_guard<std::mutex> lock(mu_);
  ThrowFailureLocked(std::numeric_limits<uint64_t>::max());
}

std::optional<Error> CommandStream::Dead(uint64_t handle) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = dead_.find(handle);
  if (it == dead_.end()) return std::nullopt;
  return it->second;
}

}  // namespace tensord::client::internal
