#pragma once

// Opening and ending a session across the registry and the memory books, and
// the one log line that says what an ended session left behind.

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/core/memory_manager.h"
#include "server/core/notice_sink.h"
#include "server/core/session_registry.h"

namespace gpumux {

class SessionLifecycle {
 public:
  // Both must outlive this object.
  SessionLifecycle(SessionRegistry* sessions, MemoryManager* memory) : sessions_(sessions), memory_(memory) {}

  // Registers the session and starts its books. Errors as SessionRegistry::Open.
  absl::StatusOr<OpenedSession> Open(SessionInfo info, std::shared_ptr<NoticeSink> sink);

  // Ends the session: no call authenticates as it any more, everything it
  // held is released, and one info line is logged with `reason` and what was
  // reclaimed. A second call for the same id does nothing.
  void Close(SessionId id, absl::string_view reason);

 private:
  SessionRegistry* sessions_;
  MemoryManager* memory_;
};

}  // namespace gpumux
