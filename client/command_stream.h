// Internal: the client's side of the session's ordered command stream
// (tensord.proto, "The session's ordered command stream").
//
// Commands go out as they are written, without waiting: Send() numbers a
// command (seq) and queues it; a writer thread sends what is queued, all
// of it in one message (up to the server's bound), after a short batching
// window (CommandStreamOptions) that a sync point cuts short, so a caller
// is never held up by the writes and its commands share messages. A reader
// thread takes the replies. Sync points
// wait only for what they need: Wait(seq) for one reply (a read's bytes),
// Drain() for every command sent so far.
//
// Errors. A failed command stops the server's stream (later commands are
// refused) until the client clears it. The first failure is thrown at the
// next sync point — Wait for a seq at or after it, or Drain — naming the
// command and its result, and cleared then, so the code after the catch
// runs again. Tensors whose command failed or was refused are dead:
// Dead(handle) says why, for the caller to throw before using one.
//
// Reconnecting. Every command is kept until its reply comes. When the
// connection drops (UNAVAILABLE) the reader reconnects a few times with
// backoff, tells the server which replies it holds, and sends the kept
// commands again; the server replays what it had answered and runs nothing
// twice. Another failure (the session is gone, the server restarted)
// breaks the stream: every wait then throws it.
//
// Flow control: at most Options::max_in_flight commands without a reply;
// Send waits beyond that (and gRPC's own flow control holds a Write while
// the server is not reading), and fails with RESOURCE_EXHAUSTED naming the
// bound when the window stays full for Options::full_wait.
//
// Thread-safety: every method may be called from any thread.
#ifndef TENSORD_CLIENT_COMMAND_STREAM_H_
#define TENSORD_CLIENT_COMMAND_STREAM_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "tensord/errors.h"
#include "tensord/v1/tensord.grpc.pb.h"

namespace tensord::client::internal {

namespace v1 = ::tensord::v1;

// The window of commands without an answer, and how long a Send waits
// when it is full; and how the writer batches (Nagle's rule): on an idle
// stream a command goes at once; while sent commands await their replies,
// new ones wait at most `batch_delay` for others to share their message
// (not at all once a sync point waits, the replies come, or
// `batch_commands` are queued).
struct CommandStreamOptions {
  size_t max_in_flight = 8192;
  std::chrono::milliseconds full_wait{60000};
  size_t batch_commands = 256;
  std::chrono::microseconds batch_delay{300};
};

class CommandStream {
 public:
  using Options = CommandStreamOptions;
  // Connects for `session` (whose server instance is `instance`, "" if
  // unknown); the writer opens the stream with its first message.
  CommandStream(std::shared_ptr<grpc::ChannelInterface> channel,
                std::string session, std::string instance,
                Options options = {});
  // Cancels the stream and joins the reader: commands without a reply may
  // not run (the session is being closed).
  ~CommandStream();
  CommandStream(const CommandStream&) = delete;
  CommandStream& operator=(const CommandStream&) = delete;

  // Numbers `cmd`, sends it and returns its seq. `want_reply`: keep its
  // reply for Wait(). Throws Error when the stream is broken, or
  // RESOURCE_EXHAUSTED when the window stays full (see Options).
  uint64_t Send(v1::Command cmd, bool want_reply = false);
  // The reply of command `seq` (sent with want_reply) once it has come.
  // Throws the first failure not yet reported if its command was sent
  // before `seq` or is `seq` (clearing it), or the stream's break.
  v1::CommandReply Wait(uint64_t seq);
  // Waits until every command sent so far has its reply; throws as Wait.
  // Returns at once when none is outstanding and no failure is waiting to
  // be reported.
  void Drain();
  // A handle for a new tensor: the client's range (2^63 and above).
  uint64_t NewHandle();
  // Why tensor `handle` (made by a command of this stream) does not exist,
  // or nullopt when nothing says so.
  std::optional<Error> Dead(uint64_t handle) const;
  // Throws the failure the stream stopped at, if one is waiting to be
  // reported, and clears it on the server as Wait does; returns otherwise.
  // A caller that finds its operand dead reports the failure here first:
  // else the server would refuse every later command until some Wait
  // reported it.
  void ThrowPendingFailure();

  static constexpr int kMaxCommandsPerMessage = 1024;  // the server's bound

 private:
  struct Failure {
    uint64_t seq = 0;
    Error error;
  };
  using ReaderWriter =
      grpc::ClientReaderWriter<v1::StreamRequest, v1::StreamResponse>;

  // Starts a connection; the writer opens it, naming what the client
  // holds, and sends every command without a reply again. Called with mu_
  // held and no write in progress.
  void ConnectLocked();
  // Queues `cmd` (numbered already) for the writer.
  void QueueLocked(v1::Command cmd);
  // Tells the writer to send what is queued without waiting for more.
  void FlushSoonLocked();
  void WriterLoop();
  void ReaderLoop();
  void Take(const v1::StreamResponse& response);
  // Throws (and clears) the failure waiting to be reported, if its seq is
  // at most `seq`.
  void ThrowFailureLocked(uint64_t seq);
  static std::string Describe(const v1::Command& cmd);

  const std::shared_ptr<grpc::ChannelInterface> channel_;
  std::unique_ptr<v1::TensorService::Stub> stub_;
  const std::string session_;
  const std::string instance_;
  const uint64_t stream_id_;  // random: other clients may share the session
  const Options options_;

  mutable std::mutex mu_;
  std::condition_variable cv_;         // replies, breaks, writes done
  std::condition_variable writer_cv_;  // something to write, or stopping
  std::unique_ptr<grpc::ClientContext> context_;  // guarded by mu_
  std::unique_ptr<ReaderWriter> rw_;              // guarded by mu_
  bool writing_ = false;   // a Write is in progress (outside mu_)
  bool need_open_ = false;  // the next message opens the connection
  bool flush_ = false;      // a sync point waits: no batching delay
  std::chrono::steady_clock::time_point first_queued_;  // outbox_[0]'s
  bool reconnecting_ = false;  // the connection is being replaced
  bool stopping_ = false;
  uint64_t next_seq_ = 0;
  uint64_t next_handle_;  // from a random point of [2^63, 2^63 + 2^62)
  uint64_t received_through_ = 0;
  std::deque<v1::Command> in_flight_;  // sent, no reply yet, in seq order
  std::vector<v1::Command> outbox_;    // not yet written
  std::unordered_map<uint64_t, std::optional<v1::CommandReply>> wanted_;
  std::optional<Failure> failure_;  // the first one not yet reported
  std::unordered_map<uint64_t, Error> dead_;  // handle -> why
  std::optional<Error> broken_;
  std::thread writer_;  // last: started once the rest is set
  std::thread reader_;
};

}  // namespace tensord::client::internal

#endif  // TENSORD_CLIENT_COMMAND_STREAM_H_
