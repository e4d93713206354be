#include "server/core/device_profiler.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/random_hex.h"
#include "common/base/status_macros.h"
#include "spdlog/spdlog.h"

namespace gpumux {

int64_t ProfileClockNanos() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return int64_t{now.tv_sec} * 1000000000 + now.tv_nsec;
}

namespace {

thread_local uint64_t current_call = 0;

absl::Status CheckCapacity(uint64_t capacity) {
  if (capacity > DeviceProfiler::kMaxCapacity) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a profile keeps at most ", DeviceProfiler::kMaxCapacity, " records, not ", capacity));
  }
  return absl::OkStatus();
}

}  // namespace

// One profile: its records, and per device the clock its device times are
// read against (a timing event completed on an idle stream of the profile's
// own, at a known monotonic time).
struct DeviceProfiler::Profile {
  struct Entry {
    DeviceWorkRecord record;
    BackendEvent start{0};
    BackendEvent end{0};
  };
  struct Clock {
    BackendStream stream{0};
    BackendEvent event{0};
    int64_t at_ns = 0;
    bool failed = false;  // no events on this device: work there is not timed
  };
  struct OpenRange {
    std::string message;
    int64_t start_ns;
  };

  uint64_t id = 0;
  std::string token;
  std::optional<SessionId> owner;  // none: a window
  SessionId charged;               // whose budget its records count in: owner, or the window's
  uint64_t capacity = 0;

  absl::Mutex mu;
  std::deque<Entry> work ABSL_GUARDED_BY(mu);
  std::deque<NvtxRangeRecord> ranges ABSL_GUARDED_BY(mu);
  // By session and client thread.
  absl::flat_hash_map<std::pair<SessionId, uint64_t>, std::vector<OpenRange>> open_ranges
      ABSL_GUARDED_BY(mu);
  uint64_t dropped_work ABSL_GUARDED_BY(mu) = 0;
  uint64_t dropped_ranges ABSL_GUARDED_BY(mu) = 0;
  absl::flat_hash_map<int32_t, Clock> clocks ABSL_GUARDED_BY(mu);
  std::vector<SessionId> sessions ABSL_GUARDED_BY(mu);
  bool ended ABSL_GUARDED_BY(mu) = false;  // collected: nothing more is added
  // A window's: its session ended or the daemon stops; the client's side.
  bool interrupted ABSL_GUARDED_BY(mu) = false;
  std::optional<HostProfile> host ABSL_GUARDED_BY(mu);
};

namespace {

// Adds `record` to a profile's `kept` records within `capacity`. `counted`:
// the memory bound let one more record in; else the oldest gives way, or
// `record` itself where there is none. What leaves goes to `evicted`, each
// counted in `dropped`. Returns how many counted records left, to give back
// to the bound.
template <typename Record>
uint64_t KeepRecord(std::deque<Record>& kept, Record record, uint64_t capacity, bool counted,
                    uint64_t& dropped, std::vector<Record>& evicted) {
  if (!counted) {
    ++dropped;
    if (kept.empty()) {
      evicted.push_back(std::move(record));
      return 0;
    }
    evicted.push_back(std::move(kept.front()));
    kept.pop_front();
    kept.push_back(std::move(record));
    return 0;
  }
  kept.push_back(std::move(record));
  uint64_t left = 0;
  while (kept.size() > capacity) {
    evicted.push_back(std::move(kept.front()));
    kept.pop_front();
    ++dropped;
    ++left;
  }
  return left;
}

}  // namespace

DeviceProfiler::DeviceProfiler(DeviceBackend* backend, uint64_t max_bytes)
    : backend_(backend),
      max_records_(max_bytes / kRecordBytes),
      max_records_per_session_(max_bytes / 4 / kRecordBytes) {}

bool DeviceProfiler::TakeRecord(SessionId session) {
  absl::MutexLock lock(&held_mu_);
  auto [it, added] = held_by_.try_emplace(session);
  Held& mine = it->second;
  if (added) {
    auto tenant = tenant_of_.find(session);
    if (tenant != tenant_of_.end()) mine.tenant = tenant->second;
  }
  uint64_t& tenants = held_by_tenant_[mine.tenant];
  if (held_ >= max_records_ || mine.records >= max_records_per_session_ ||
      tenants >= max_records_per_session_) {
    if (tenants == 0) held_by_tenant_.erase(mine.tenant);
    if (mine.records == 0) held_by_.erase(it);
    return false;
  }
  ++held_;
  ++mine.records;
  ++tenants;
  return true;
}

void DeviceProfiler::ReturnRecords(SessionId session, uint64_t count) {
  if (count == 0) return;
  absl::MutexLock lock(&held_mu_);
  auto it = held_by_.find(session);
  if (it == held_by_.end()) return;
  const uint64_t returned = std::min(count, it->second.records);
  it->second.records -= returned;
  held_ -= returned;
  auto tenant = held_by_tenant_.find(it->second.tenant);
  if (tenant != held_by_tenant_.end()) {
    tenant->second -= std::min(returned, tenant->second);
    if (tenant->second == 0) held_by_tenant_.erase(tenant);
  }
  if (it->second.records == 0) held_by_.erase(it);
}

void DeviceProfiler::AddSession(SessionId session, std::string tenant) {
  absl::MutexLock lock(&held_mu_);
  tenant_of_[session] = std::move(tenant);
}

DeviceProfiler::~DeviceProfiler() {
  absl::MutexLock lock(&mu_);
  for (auto& [id, profile] : profiles_) ReleaseEvents(*profile);
}

absl::StatusOr<std::shared_ptr<DeviceProfiler::Profile>> DeviceProfiler::NewProfile(
    uint64_t capacity) {
  GPUMUX_RETURN_IF_ERROR(CheckCapacity(capacity));
  auto profile = std::make_shared<Profile>();
  profile->capacity = capacity == 0 ? kDefaultCapacity : capacity;
  return profile;
}

absl::StatusOr<DeviceProfiler::Started> DeviceProfiler::Start(SessionId owner, uint64_t capacity) {
  GPUMUX_ASSIGN_OR_RETURN(std::shared_ptr<Profile> profile, NewProfile(capacity));
  absl::MutexLock lock(&mu_);
  int owned = 0;
  for (const auto& [id, p] : profiles_) owned += p->owner == owner ? 1 : 0;
  if (owned >= kMaxProfilesPerSession) {
    return absl::ResourceExhaustedError(
        absl::StrCat("session ", owner.value(), " has ", owned,
                     " profiles open, the most one session may: finish one first"));
  }
  profile->id = next_id_++;
  profile->token = RandomHex(16);
  profile->owner = owner;
  profile->charged = owner;
  profiles_.emplace(profile->id, profile);
  return Started{profile->id, profile->token};
}

bool DeviceProfiler::Join(SessionId session, absl::string_view token) {
  if (token.empty()) return false;
  absl::MutexLock lock(&mu_);
  for (auto& [id, profile] : profiles_) {
    if (profile->owner.has_value() && profile->token == token) {
      if (!of_session_.emplace(session, profile).second) return false;
      {
        absl::MutexLock profile_lock(&profile->mu);
        profile->sessions.push_back(session);
      }
      profiled_sessions_.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
  }
  return false;
}

absl::StatusOr<DeviceProfile> DeviceProfiler::Finish(SessionId owner, uint64_t id) {
  std::shared_ptr<Profile> profile;
  {
    absl::MutexLock lock(&mu_);
    auto it = profiles_.find(id);
    if (it == profiles_.end() || it->second->owner != owner) {
      return absl::NotFoundError(
          absl::StrCat("session ", owner.value(), " has no open profile ", id));
    }
    profile = it->second;
    profiles_.erase(it);
    UnmapSessionsLocked(profile);
  }
  return Collect(*profile);
}

absl::StatusOr<uint64_t> DeviceProfiler::BeginWindow(SessionId session, uint64_t capacity) {
  GPUMUX_ASSIGN_OR_RETURN(std::shared_ptr<Profile> profile, NewProfile(capacity));
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return absl::UnavailableError("gpumuxd is shutting down");
  if (of_session_.contains(session)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "session ", session.value(), " is being profiled already; profile it once that ends"));
  }
  profile->id = next_id_++;
  profile->charged = session;
  {
    absl::MutexLock profile_lock(&profile->mu);
    profile->sessions.push_back(session);
  }
  profiles_.emplace(profile->id, profile);
  of_session_.emplace(session, profile);
  profiled_sessions_.fetch_add(1, std::memory_order_relaxed);
  return profile->id;
}

DeviceProfile DeviceProfiler::EndWindow(uint64_t id) {
  std::shared_ptr<Profile> profile;
  {
    absl::MutexLock lock(&mu_);
    auto it = profiles_.find(id);
    if (it == profiles_.end() || it->second->owner.has_value()) return DeviceProfile();
    profile = it->second;
    profiles_.erase(it);
    UnmapSessionsLocked(profile);
  }
  return Collect(*profile);
}

void DeviceProfiler::UnmapSessionsLocked(const std::shared_ptr<Profile>& profile) {
  for (auto s = of_session_.begin(); s != of_session_.end();) {
    if (s->second == profile) {
      of_session_.erase(s++);
      profiled_sessions_.fetch_sub(1, std::memory_order_relaxed);
    } else {
      ++s;
    }
  }
}

std::shared_ptr<DeviceProfiler::Profile> DeviceProfiler::FindProfile(uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = profiles_.find(id);
  return it == profiles_.end() ? nullptr : it->second;
}

bool DeviceProfiler::AwaitWindow(uint64_t id, absl::Time until) {
  std::shared_ptr<Profile> profile = FindProfile(id);
  if (profile == nullptr) return false;
  absl::MutexLock lock(&profile->mu);
  profile->mu.AwaitWithDeadline(absl::Condition(&profile->interrupted), until);
  return !profile->interrupted;
}

void DeviceProfiler::OnHostProfile(SessionId session, uint64_t id, HostProfile host) {
  std::shared_ptr<Profile> profile = FindProfile(id);
  if (profile == nullptr || profile->owner.has_value()) return;
  absl::MutexLock lock(&profile->mu);
  if (profile->sessions.empty() || profile->sessions.front() != session) return;
  profile->host = std::move(host);
}

std::optional<HostProfile> DeviceProfiler::AwaitHostProfile(uint64_t id, absl::Time deadline) {
  std::shared_ptr<Profile> profile = FindProfile(id);
  if (profile == nullptr) return std::nullopt;
  absl::MutexLock lock(&profile->mu);
  const auto answered = [&profile]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(profile->mu) {
    return profile->host.has_value() || profile->interrupted;
  };
  profile->mu.AwaitWithDeadline(absl::Condition(&answered), deadline);
  return std::move(profile->host);
}

void DeviceProfiler::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutting_down_ = true;
  for (auto& [id, profile] : profiles_) {
    absl::MutexLock profile_lock(&profile->mu);
    profile->interrupted = true;
  }
}

void DeviceProfiler::SessionEnded(SessionId session) {
  {
    absl::MutexLock lock(&held_mu_);
    tenant_of_.erase(session);  // what its records hold keeps its tenant
  }
  std::vector<std::shared_ptr<Profile>> dropped;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = of_session_.find(session); it != of_session_.end()) {
      if (!it->second->owner.has_value()) {
        absl::MutexLock profile_lock(&it->second->mu);
        it->second->interrupted = true;  // a window: its waits end
      }
      of_session_.erase(it);
      profiled_sessions_.fetch_sub(1, std::memory_order_relaxed);
    }
    for (auto it = profiles_.begin(); it != profiles_.end();) {
      if (it->second->owner == session) {
        dropped.push_back(it->second);
        profiles_.erase(it++);
      } else {
        ++it;
      }
    }
    for (const std::shared_ptr<Profile>& profile : dropped) {
      UnmapSessionsLocked(profile);
    }
  }
  for (const std::shared_ptr<Profile>& profile : dropped) ReleaseEvents(*profile);
}

std::shared_ptr<DeviceProfiler::Profile> DeviceProfiler::ProfileOf(SessionId session) {
  // Relaxed: a session joins its profile before its first call (at open) or
  // under mu_ (a window); a call racing a window's start may go unrecorded.
  if (profiled_sessions_.load(std::memory_order_relaxed) == 0) return nullptr;
  absl::MutexLock lock(&mu_);
  auto it = of_session_.find(session);
  return it == of_session_.end() ? nullptr : it->second;
}

// ---- Recording ----

DeviceProfiler::Work::Work(Work&& other) noexcept
    : profiler_(other.profiler_),
      profile_(std::move(other.profile_)),
      record_(std::move(other.record_)),
      backend_(other.backend_),
      start_(std::exchange(other.start_, BackendEvent(0))),
      end_(std::exchange(other.end_, BackendEvent(0))) {}

DeviceProfiler::Work& DeviceProfiler::Work::operator=(Work&& other) noexcept {
  if (this != &other) {
    if (start_.value() != 0) profiler_->backend_->DestroyEvent(start_).IgnoreError();
    if (end_.value() != 0) profiler_->backend_->DestroyEvent(end_).IgnoreError();
    profiler_ = other.profiler_;
    profile_ = std::move(other.profile_);
    record_ = std::move(other.record_);
    backend_ = other.backend_;
    start_ = std::exchange(other.start_, BackendEvent(0));
    end_ = std::exchange(other.end_, BackendEvent(0));
  }
  return *this;
}

DeviceProfiler::Work::~Work() {
  // Dropped without End (an early return): its events go too.
  if (start_.value() != 0) profiler_->backend_->DestroyEvent(start_).IgnoreError();
  if (end_.value() != 0) profiler_->backend_->DestroyEvent(end_).IgnoreError();
}

DeviceProfiler::Work DeviceProfiler::Begin(DeviceProfiler* profiler, SessionId session,
                                           absl::string_view name, const ProfiledSite& site,
                                           uint64_t bytes) {
  if (profiler == nullptr) return Work();
  return profiler->BeginWork(session, name, site, bytes);
}

void DeviceProfiler::Queued(Work& work) {
  if (work.start_.value() == 0 || work.end_.value() != 0) return;
  DeviceBackend* backend = work.profiler_->backend_;
  absl::StatusOr<BackendEvent> end =
      backend->CreateEvent(DeviceIndex(work.record_.device), EventFlags{.enable_timing = true});
  if (end.ok() && backend->RecordEvent(*end, work.backend_).ok()) {
    work.end_ = *end;
    return;
  }
  // Not timed after all.
  if (end.ok()) backend->DestroyEvent(*end).IgnoreError();
  backend->DestroyEvent(std::exchange(work.start_, BackendEvent(0))).IgnoreError();
}

void DeviceProfiler::End(Work work, bool ran, bool on_device_too) {
  if (work.profile_ == nullptr) return;
  work.profiler_->EndWork(std::move(work), ran, on_device_too);
}

DeviceProfiler::Work DeviceProfiler::BeginWork(SessionId session, absl::string_view name,
                                               const ProfiledSite& site, uint64_t bytes) {
  Work work;
  work.profile_ = ProfileOf(session);
  if (work.profile_ == nullptr) return work;
  work.profiler_ = this;
  work.backend_ = site.backend;
  DeviceWorkRecord& r = work.record_;
  r.name = std::string(name);
  r.session = session.value();
  r.device = site.device.value();
  r.stream = site.stream.value();
  r.call_id = current_call;
  r.bytes = bytes;
  if (site.backend.value() != 0) {
    bool timed = false;
    {
      // The device's clock, made on its first timed work.
      Profile& p = *work.profile_;
      absl::MutexLock lock(&p.mu);
      Profile::Clock& clock = p.clocks[r.device];
      if (clock.event.value() == 0 && !clock.failed) {
        absl::StatusOr<BackendStream> stream = backend_->CreateStream(
            site.device, backend_->GetStreamPriorityRange(site.device).least);
        absl::StatusOr<BackendEvent> event =
            stream.ok() ? backend_->CreateEvent(site.device, EventFlags{.enable_timing = true})
                        : stream.status();
        absl::Status recorded =
            event.ok() ? backend_->RecordEvent(*event, *stream) : event.status();
        if (recorded.ok()) recorded = backend_->SynchronizeEvent(*event);
        if (recorded.ok()) {
          clock = Profile::Clock{*stream, *event, ProfileClockNanos(), false};
        } else {
          spdlog::warn("profiling: work on device {} is not timed: {}", r.device,
                       recorded.ToString());
          if (event.ok()) backend_->DestroyEvent(*event).IgnoreError();
          if (stream.ok()) backend_->DestroyStream(*stream).IgnoreError();
          clock.failed = true;
        }
      }
      timed = !clock.failed;
    }
    if (timed) {
      absl::StatusOr<BackendEvent> start =
          backend_->CreateEvent(site.device, EventFlags{.enable_timing = true});
      if (start.ok() && backend_->RecordEvent(*start, site.backend).ok()) {
        work.start_ = *start;
      } else if (start.ok()) {
        backend_->DestroyEvent(*start).IgnoreError();
      }
    }
  }
  r.host_start_ns = ProfileClockNanos();
  return work;
}

void DeviceProfiler::EndWork(Work work, bool ran, bool on_device_too) {
  if (ran) Queued(work);  // where the caller did not: at its end
  Profile::Entry entry;
  entry.record = std::move(work.record_);
  entry.record.host_end_ns = ProfileClockNanos();
  entry.start = std::exchange(work.start_, BackendEvent(0));
  entry.end = std::exchange(work.end_, BackendEvent(0));
  if (!ran) {
    if (entry.start.value() != 0) backend_->DestroyEvent(entry.start).IgnoreError();
    if (entry.end.value() != 0) backend_->DestroyEvent(entry.end).IgnoreError();
    return;
  }
  if (entry.start.value() == 0 && on_device_too) {
    entry.record.device_start_ns = entry.record.host_start_ns;
    entry.record.device_end_ns = entry.record.host_end_ns;
  }
  Profile& p = *work.profile_;
  std::vector<Profile::Entry> evicted;
  {
    absl::MutexLock lock(&p.mu);
    if (p.ended) {
      evicted.push_back(std::move(entry));
    } else {
      ReturnRecords(p.charged, KeepRecord(p.work, std::move(entry), p.capacity,
                                          TakeRecord(p.charged), p.dropped_work, evicted));
    }
  }
  for (const Profile::Entry& e : evicted) {
    if (e.start.value() != 0) backend_->DestroyEvent(e.start).IgnoreError();
    if (e.end.value() != 0) backend_->DestroyEvent(e.end).IgnoreError();
  }
}

void DeviceProfiler::RangePushed(SessionId session, uint64_t thread, absl::string_view message,
                                 int depth) {
  std::shared_ptr<Profile> profile = ProfileOf(session);
  if (profile == nullptr) return;
  absl::MutexLock lock(&profile->mu);
  std::vector<Profile::OpenRange>& open = profile->open_ranges[{session, thread}];
  // A window that began inside ranges sees only the ones pushed since.
  open.resize(std::min<size_t>(open.size(), static_cast<size_t>(std::max(depth, 0))));
  open.push_back(Profile::OpenRange{std::string(message), ProfileClockNanos()});
}

void DeviceProfiler::RangePopped(SessionId session, uint64_t thread, int depth) {
  std::shared_ptr<Profile> profile = ProfileOf(session);
  if (profile == nullptr) return;
  absl::MutexLock lock(&profile->mu);
  auto it = profile->open_ranges.find({session, thread});
  if (it == profile->open_ranges.end()) return;  // pushed before the window
  std::vector<Profile::OpenRange>& open = it->second;
  if (depth < 0 || static_cast<size_t>(depth) >= open.size()) return;  // as above
  open.resize(static_cast<size_t>(depth) + 1);
  NvtxRangeRecord range{
      std::move(open.back().message), session.value(),     static_cast<uint32_t>(depth),
      open.back().start_ns,           ProfileClockNanos(), thread};
  open.pop_back();
  if (open.empty()) profile->open_ranges.erase(it);
  if (profile->ended) return;
  std::vector<NvtxRangeRecord> evicted;
  ReturnRecords(profile->charged,
                KeepRecord(profile->ranges, std::move(range), profile->capacity,
                           TakeRecord(profile->charged), profile->dropped_ranges, evicted));
}

DeviceProfiler::CallScope::CallScope(uint64_t call_id) : previous_(current_call) {
  current_call = call_id;
}

DeviceProfiler::CallScope::~CallScope() { current_call = previous_; }

// ---- Collecting ----

DeviceProfile DeviceProfiler::Collect(Profile& profile) {
  std::deque<Profile::Entry> work;
  DeviceProfile out;
  absl::flat_hash_map<int32_t, Profile::Clock> clocks;
  {
    absl::MutexLock lock(&profile.mu);
    profile.ended = true;
    ReturnRecords(profile.charged, profile.work.size() + profile.ranges.size());
    work.swap(profile.work);
    clocks = profile.clocks;
    out.dropped_work = profile.dropped_work;
    out.dropped_ranges = profile.dropped_ranges;
    out.ranges.assign(profile.ranges.begin(), profile.ranges.end());
    for (auto& [where, open] : profile.open_ranges) {
      for (size_t depth = 0; depth < open.size(); ++depth) {
        out.ranges.push_back(NvtxRangeRecord{open[depth].message, where.first.value(),
                                             static_cast<uint32_t>(depth), open[depth].start_ns, -1,
                                             where.second});
      }
    }
  }
  out.work.reserve(work.size());
  for (Profile::Entry& e : work) {
    if (e.start.value() != 0 && e.end.value() != 0) {
      // Work still queued completes first (a crashed program's included).
      const Profile::Clock& clock = clocks[e.record.device];
      absl::StatusOr<float> from_clock = backend_->SynchronizeEvent(e.end).ok()
                                             ? backend_->ElapsedTimeMs(clock.event, e.start)
                                             : absl::UnavailableError("not completed");
      absl::StatusOr<float> on_device =
          from_clock.ok() ? backend_->ElapsedTimeMs(e.start, e.end) : from_clock.status();
      if (on_device.ok()) {
        e.record.device_start_ns = clock.at_ns + std::llround(double{*from_clock} * 1e6);
        e.record.device_end_ns = e.record.device_start_ns + std::llround(double{*on_device} * 1e6);
      }
    }
    out.work.push_back(std::move(e.record));
  }
  ReleaseEvents(profile);
  for (Profile::Entry& e : work) {
    if (e.start.value() != 0) backend_->DestroyEvent(e.start).IgnoreError();
    if (e.end.value() != 0) backend_->DestroyEvent(e.end).IgnoreError();
  }
  std::sort(out.work.begin(), out.work.end(),
            [](const auto& a, const auto& b) { return a.host_start_ns < b.host_start_ns; });
  std::sort(out.ranges.begin(), out.ranges.end(),
            [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
  return out;
}

void DeviceProfiler::ReleaseEvents(Profile& profile) {
  std::deque<Profile::Entry> work;
  absl::flat_hash_map<int32_t, Profile::Clock> clocks;
  {
    absl::MutexLock lock(&profile.mu);
    profile.ended = true;
    work.swap(profile.work);
    clocks.swap(profile.clocks);
  }
  for (const Profile::Entry& e : work) {
    if (e.start.value() != 0) backend_->DestroyEvent(e.start).IgnoreError();
    if (e.end.value() != 0) backend_->DestroyEvent(e.end).IgnoreError();
  }
  for (const auto& [device, clock] : clocks) {
    if (clock.event.value() != 0) backend_->DestroyEvent(clock.event).IgnoreError();
    if (clock.stream.value() != 0) backend_->DestroyStream(clock.stream).IgnoreError();
  }
}

}  // namespace gpumux
