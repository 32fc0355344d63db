#include "server/refusal_log.h"

#include <string>

#include "core/base/absl_compat.h"
#include "core/base/op_checks.h"
#include "spdlog/spdlog.h"

namespace tensord::server {

bool RefusalLog::Note(const absl::Status& status, std::string_view peer,
                      std::string_view session, std::string_view method) {
  const core::Refusal why = core::RefusalOf(status);
  if (why == core::Refusal::kNone) return false;
  if (metrics_ != nullptr) metrics_->RecordRefusal(why);
  // A session id is a credential: only its first 8 characters are logged.
  Record(why, peer, session.substr(0, 8), method,
         core::FromAbsl(status.message()));
  return true;
}

bool RefusalLog::Record(core::Refusal why, std::string_view peer,
                        std::string_view session, std::string_view method,
                        std::string_view message, Clock::time_point now) {
  uint64_t suppressed = 0;
  {
    absl::MutexLock lock(&mu_);
    Window& w = windows_[static_cast<size_t>(why)];
    if (now - w.start >= std::chrono::seconds(1)) {
      suppressed = w.suppressed;
      w = Window{now, 0, 0};
    }
    if (w.lines >= kLinesPerSecond) {
      ++w.suppressed;
      return false;
    }
    ++w.lines;
  }
  // Bounded: a message is echoed at most this long.
  constexpr size_t kMaxMessage = 300;
  const std::string reason(core::RefusalName(why));
  spdlog::warn("refused ({}): peer={} session={} rpc={}: {}{}", reason, peer,
               session.empty() ? "-" : std::string(session), method,
               core::Echo(message, kMaxMessage),
               suppressed == 0
                   ? std::string()
                   : " (" + std::to_string(suppressed) + " more " + reason +
                         " refusals were not logged in the second before)");
  return true;
}

}  // namespace tensord::server
