// SessionBound: something tied to a session's life (an open stream's
// upload memory or reader, a command stream's state) that must be let go
// when the session ends. Runtime::BindToSession ties one.
#ifndef TENSORD_CORE_RUNTIME_SESSION_BOUND_H_
#define TENSORD_CORE_RUNTIME_SESSION_BOUND_H_

#include "absl/status/status.h"

namespace tensord::core {

// Something an open stream of a session holds (an upload's memory, a
// reader's tensor) that must be let go when the session ends. See
// HandleTable::Bind.
class SessionBound {
 public:
  virtual ~SessionBound() = default;
  // The session ended; `why` says how (NOT_FOUND: closed or its lease ran
  // out; UNAVAILABLE: the server is shutting down). Called at most once, on
  // the thread that ended the session, with no lock of the table held; must
  // not call back into the table.
  virtual void OnSessionEnded(const absl::Status& why) = 0;
};

}  // namespace tensord::core

#endif  // TENSORD_CORE_RUNTIME_SESSION_BOUND_H_
