// Refused requests made visible: each refusal (a bad or missing token, a
// session quota, a device's budget; core/base/refusal.h) is counted by reason in
// the metrics (tensord_refusals_total{reason=...}) and logged with the
// peer's address, the session (its first 8 hex digits, never the whole id,
// which is a credential) and the method — at most kLinesPerSecond lines per
// reason each second, so a flood of refusals cannot flood the log; the
// first line after a suppressed stretch says how many were left out.
//
// Note is the one place a finished request's status is checked for a
// refusal: every RPC (RpcScope::Finish), each command of a Stream and a
// node's PullChunk go through it.
//
// Thread-safety: Note and Record may be called concurrently.
#ifndef TENSORD_SERVER_REFUSAL_LOG_H_
#define TENSORD_SERVER_REFUSAL_LOG_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/base/refusal.h"
#include "server/metrics.h"

namespace tensord::server {

class RefusalLog {
 public:
  static constexpr int kLinesPerSecond = 5;
  using Clock = std::chrono::steady_clock;

  // `metrics` (borrowed, outlives the log; nullptr: count nowhere) is
  // where Note counts refusals.
  explicit RefusalLog(Metrics* metrics = nullptr) : metrics_(metrics) {}

  // If `status` is a refusal (core::RefusalOf), counts it in the metrics
  // by reason and Records it with the peer, the session's first 8
  // characters and the method. Returns whether it was a refusal.
  bool Note(const absl::Status& status, std::string_view peer,
            std::string_view session, std::string_view method);

  // Logs the refusal unless its reason has had kLinesPerSecond lines in the
  // current second. Returns whether it was logged. `why` is not kNone.
  bool Record(core::Refusal why, std::string_view peer,
              std::string_view session, std::string_view method,
              std::string_view message, Clock::time_point now = Clock::now());

 private:
  struct Window {
    Clock::time_point start;
    int lines = 0;
    uint64_t suppressed = 0;
  };
  Metrics* const metrics_;  // borrowed; may be null
  absl::Mutex mu_;
  std::array<Window, 5> windows_ ABSL_GUARDED_BY(mu_);  // by Refusal
};

}  // namespace tensord::server

#endif  // TENSORD_SERVER_REFUSAL_LOG_H_
