#pragma once

// SessionRegistry: the open sessions, their identities and secrets, and the
// sink each one's notices go to. A session exists from Open until Close; the
// rpc layer ties that to the life of the client's session stream.
// Thread-safe.

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gpumux/common/ids.h"
#include "server/core/limit_refusal.h"
#include "server/core/notice_sink.h"
#include "server/core/tenant_shares.h"

namespace gpumux {

// What the registry records of an open session.
struct SessionRecord {
  SessionId id;
  std::string client_name;
  int64_t pid = 0;
  // Never empty: a session opened without one is its own tenant "session-<id>".
  std::string tenant;
  // Whether the session named its tenant when it opened (else `tenant` is
  // its own "session-<id>").
  bool tenant_named = false;
  std::map<std::string, std::string> labels;
  absl::Time opened;
  // Its client library records its calls for a live profile
  // (OpenSessionRequest.records_host_calls).
  bool records_host_calls = false;
};

struct OpenedSession {
  SessionRecord info;
  std::string secret;  // 32 hex digits
};

// UNAUTHENTICATED "session N is closed": what every core book answers for a
// session that ended (or never opened) while a call for it was under way.
absl::Status SessionClosedError(SessionId session);

// A tenant name as sessions and tenant limits take it: INVALID_ARGUMENT for
// an empty one, one over 256 bytes or one holding a control character.
absl::Status CheckTenantName(absl::string_view tenant);

// The tenant a session named when it opened, or "" for one opened without:
// the namespace of the groups it forms and names, and whose shares of the
// daemon-wide budgets it draws on (sessions opened without a tenant share
// one namespace and one share).
inline std::string NamedTenant(const SessionRecord& session) {
  return session.tenant_named ? session.tenant : std::string();
}

class SessionRegistry {
 public:
  // Daemon-wide budget (gpumuxd --max-sessions).
  static constexpr size_t kDefaultMaxSessions = 4096;
  // Sets the most sessions open at once; call before any Open.
  void set_max_sessions(size_t max_sessions) { max_sessions_ = max_sessions; }

  // Registers a session. `sink` receives its notices until Close.
  // INVALID_ARGUMENT for a client name, tenant or label over 256 bytes or
  // holding a control character, more than 64 labels, or a pid outside
  // [0, 2^22] (0: unknown); RESOURCE_EXHAUSTED
  // when max_sessions are open or the tenant holds its share of them
  // (TenantShares); UNAVAILABLE once the daemon is shutting down.
  absl::StatusOr<OpenedSession> Open(SessionRecord info, std::shared_ptr<NoticeSink> sink);

  // Checks "<id>:<secret>" from request metadata. UNAUTHENTICATED when it is
  // malformed, names no open session, or the secret does not match;
  // UNAVAILABLE once the daemon is shutting down.
  absl::StatusOr<SessionId> Authenticate(absl::string_view credentials) const;

  // The memory socket's peer check: the first process to fetch memory for
  // the session (SO_PEERCRED) fixes its uid, and a later fetch from another
  // uid is PERMISSION_DENIED, so stolen credentials are no use to another
  // user. UNAUTHENTICATED "session N is closed" for a session not open.
  absl::Status BindMemoryPeer(SessionId id, uid_t uid);

  // Removes the session; returns its info, or nullopt if it was not open.
  std::optional<SessionRecord> Close(SessionId id);

  bool IsOpen(SessionId id) const;
  std::optional<SessionRecord> Get(SessionId id) const;
  // NamedTenant of an open session; UNAUTHENTICATED "session N is closed"
  // otherwise.
  absl::StatusOr<std::string> NamedTenantOf(SessionId id) const;
  // Open sessions by id.
  std::vector<SessionRecord> List() const;

  // The session's sink; null for a session that is not open.
  std::shared_ptr<NoticeSink> SinkOf(SessionId id) const;
  // Delivers a notice to the session's sink; a closed session is skipped.
  void NotifySegmentReleased(SessionId id, DeviceIndex device, SegmentId segment,
                             uint64_t offset = 0, uint64_t size = 0) const;

  // Asks every open session's sink to end its session (daemon shutdown).
  void TerminateAll(absl::string_view message) const;

  // The daemon is shutting down: from now on every session call, and every
  // call still in flight, is answered with ShuttingDownError() (as sessions
  // end under them, the books would otherwise say UNAUTHENTICATED or
  // NOT_FOUND).
  void BeginShutdown() { shutting_down_.store(true, std::memory_order_release); }
  bool shutting_down() const { return shutting_down_.load(std::memory_order_acquire); }
  // UNAVAILABLE "gpumuxd is shutting down".
  static absl::Status ShuttingDownError();

 private:
  struct Entry {
    SessionRecord info;
    std::string secret;
    std::shared_ptr<NoticeSink> sink;
    std::optional<uid_t> memory_peer_uid;
  };

  std::atomic<bool> shutting_down_{false};  // a flag only: orders nothing else
  size_t max_sessions_ = kDefaultMaxSessions;
  LimitRefusal sessions_refusal_{"--max-sessions"};
  TenantShares tenant_sessions_{"sessions", "--max-sessions"};
  mutable absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<SessionId, Entry> sessions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpumux
