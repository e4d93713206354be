#include "server/core/session_registry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/printable_text.h"
#include "common/base/random_hex.h"
#include "common/base/status_macros.h"

namespace gpumux {

absl::Status SessionClosedError(SessionId session) {
  return absl::UnauthenticatedError(absl::StrCat("session ", session.value(), " is closed"));
}
namespace {

constexpr size_t kMaxFieldBytes = 256;
// Linux's PID_MAX_LIMIT: no process id is larger.
constexpr int64_t kMaxPid = int64_t{1} << 22;
constexpr size_t kMaxLabels = 64;
constexpr size_t kSecretBytes = 16;
// "<session id>:<secret>": 20 digits at most, a colon, 32 hex digits.
constexpr size_t kMaxCredentialBytes = 20 + 1 + 2 * kSecretBytes;

// Names and labels are printed in operators' tables and in the daemon's log:
// a control character there (an ANSI escape, a newline forging a log line)
// is refused, C0, DEL and C1 alike (C1 as UTF-8, U+0080 to U+009F).
absl::Status CheckField(absl::string_view what, absl::string_view value) {
  if (value.size() > kMaxFieldBytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is ", value.size(), " bytes; at most ",
                                                   kMaxFieldBytes, " are allowed"));
  }
  return CheckPrintable(
      what, value,
      "names and labels are printed in operators' tables and logs, so they must be printable");
}

// Compares without an early exit so the time taken does not reveal how many
// leading characters of a guessed secret were right.
bool SecretsEqual(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

absl::Status SessionRegistry::ShuttingDownError() {
  return absl::UnavailableError("gpumuxd is shutting down; reconnect once it is back");
}

absl::Status CheckTenantName(absl::string_view tenant) {
  if (tenant.empty()) {
    return absl::InvalidArgumentError(
        "the tenant must not be empty (a session without one is its own tenant "
        "\"session-<id>\")");
  }
  return CheckField("tenant", tenant);
}

absl::StatusOr<OpenedSession> SessionRegistry::Open(SessionRecord info,
                                                    std::shared_ptr<NoticeSink> sink) {
  if (shutting_down()) return ShuttingDownError();
  if (absl::Status s = CheckField("client name", info.client_name); !s.ok()) return s;
  if (absl::Status s = CheckField("tenant", info.tenant); !s.ok()) return s;
  if (info.pid < 0 || info.pid > kMaxPid) {
    return absl::InvalidArgumentError(
        absl::StrCat("pid ", info.pid, " is no process id: give the client's pid, in [1, ", kMaxPid,
                     "], or 0 when it is unknown"));
  }
  if (info.labels.size() > kMaxLabels) {
    return absl::InvalidArgumentError(
        absl::StrCat(info.labels.size(), " labels given; at most ", kMaxLabels, " are allowed"));
  }
  for (const auto& [key, value] : info.labels) {
    if (key.empty()) return absl::InvalidArgumentError("label keys must not be empty");
    if (absl::Status s = CheckField("a label key", key); !s.ok())
      return s;  // printable before it is quoted
    if (absl::Status s = CheckField(absl::StrCat("label '", key.substr(0, 32), "'"), key + value);
        !s.ok()) {
      return s;
    }
  }
  OpenedSession opened;
  opened.secret = RandomHex(kSecretBytes);
  absl::MutexLock lock(&mu_);
  if (sessions_.size() >= max_sessions_) {
    return sessions_refusal_.Refuse(
        absl::StrCat("the daemon already serves ", sessions_.size(),
                     " sessions, its limit (gpumuxd --max-sessions=", max_sessions_,
                     "); retry later or ask the operator to raise it"));
  }
  info.tenant_named = !info.tenant.empty();
  GPUMUX_RETURN_IF_ERROR(tenant_sessions_.Take(NamedTenant(info), max_sessions_));
  info.id = SessionId(next_id_++);
  if (!info.tenant_named) info.tenant = absl::StrCat("session-", info.id.value());
  info.opened = absl::Now();
  opened.info = info;
  sessions_.emplace(info.id, Entry{std::move(info), opened.secret, std::move(sink)});
  return opened;
}

absl::StatusOr<SessionId> SessionRegistry::Authenticate(absl::string_view credentials) const {
  if (shutting_down()) return ShuttingDownError();
  if (credentials.size() > kMaxCredentialBytes) {
    return absl::UnauthenticatedError(
        absl::StrCat("gpumux-session metadata is ", credentials.size(),
                     " bytes; Session.Open's credentials \"<session id>:<secret>\" are at most ",
                     kMaxCredentialBytes));
  }
  size_t colon = credentials.find(':');
  uint64_t id = 0;
  if (colon == absl::string_view::npos || !absl::SimpleAtoi(credentials.substr(0, colon), &id)) {
    return absl::UnauthenticatedError(
        "malformed gpumux-session metadata: expected \"<session id>:<secret>\" as returned by "
        "Session.Open");
  }
  absl::string_view secret = credentials.substr(colon + 1);
  absl::ReaderMutexLock lock(&mu_);
  auto it = sessions_.find(SessionId(id));
  if (it == sessions_.end() || !SecretsEqual(it->second.secret, secret)) {
    return absl::UnauthenticatedError(absl::StrCat(
        "session ", id,
        " is not open or its secret does not match; open a session with Session.Open"));
  }
  return it->first;
}

absl::Status SessionRegistry::BindMemoryPeer(SessionId id, uid_t uid) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return SessionClosedError(id);
  std::optional<uid_t>& bound = it->second.memory_peer_uid;
  if (!bound.has_value()) bound = uid;
  if (*bound != uid) {
    return absl::PermissionDeniedError(absl::StrCat("session ", id.value(),
                                                    " fetches its memory as uid ", *bound,
                                                    "; a process of uid ", uid, " may not"));
  }
  return absl::OkStatus();
}

std::optional<SessionRecord> SessionRegistry::Close(SessionId id) {
  std::shared_ptr<NoticeSink> sink;  // released outside the lock
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return std::nullopt;
  SessionRecord info = std::move(it->second.info);
  sink = std::move(it->second.sink);
  sessions_.erase(it);
  tenant_sessions_.Give(NamedTenant(info));
  return info;
}

bool SessionRegistry::IsOpen(SessionId id) const {
  absl::ReaderMutexLock lock(&mu_);
  return sessions_.contains(id);
}

std::optional<SessionRecord> SessionRegistry::Get(SessionId id) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return std::nullopt;
  return it->second.info;
}

absl::StatusOr<std::string> SessionRegistry::NamedTenantOf(SessionId id) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return SessionClosedError(id);
  return NamedTenant(it->second.info);
}

std::vector<SessionRecord> SessionRegistry::List() const {
  std::vector<SessionRecord> out;
  {
    absl::ReaderMutexLock lock(&mu_);
    out.reserve(sessions_.size());
    for (const auto& [id, entry] : sessions_) out.push_back(entry.info);
  }
  std::sort(out.begin(), out.end(),
            [](const SessionRecord& a, const SessionRecord& b) { return a.id < b.id; });
  return out;
}

std::shared_ptr<NoticeSink> SessionRegistry::SinkOf(SessionId id) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second.sink;
}

void SessionRegistry::NotifySegmentReleased(SessionId id, DeviceIndex device, SegmentId segment,
                                            uint64_t offset, uint64_t size) const {
  if (std::shared_ptr<NoticeSink> sink = SinkOf(id)) {
    sink->SegmentReleased(device, segment, offset, size);
  }
}

void SessionRegistry::TerminateAll(absl::string_view message) const {
  std::vector<std::shared_ptr<NoticeSink>> sinks;
  {
    absl::ReaderMutexLock lock(&mu_);
    for (const auto& [id, entry] : sessions_) sinks.push_back(entry.sink);
  }
  for (const auto& sink : sinks) {
    if (sink != nullptr) sink->Terminate(SessionEndReason::kShutdown, message);
  }
}

}  // namespace gpumux
