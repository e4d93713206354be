#pragma once

// DeviceProfiler: the daemon's side of a profile. While a session is
// profiled, every piece of work the daemon runs for it (copies, memsets,
// random fills, collectives, synchronizes, waits on events) is recorded with
// the daemon's time handling it and, for work on a stream, its time on the
// device, measured by timing events recorded around it on that stream (the
// backend's events: CUDA's on CUDA, stream timestamps on the host backend).
// Sessions are profiled in two ways:
//   - a profile that a session owns (`gpumux bottleneck`): Start hands out
//     a token, sessions that open with it join, their records outlive them,
//     and Finish collects them;
//   - a window on one live session (`gpumux profile`): BeginWindow/EndWindow.
// Records are bounded (the newest `capacity` kept; the rest counted as
// dropped), and so is the memory they take, estimated at kRecordBytes a
// record: `max_bytes` for every open profile together and a quarter of it
// for the profiles charged to one session (its own, or the windows on it).
// A record past either bound displaces its profile's oldest, or is dropped.
// With nothing profiled, recording costs one relaxed load.
// Thread-safe.

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gpumux/common/ids.h"
#include "gpumux/common/profile_data.h"
#include "server/backend/device_backend.h"

namespace gpumux {

// Where a piece of work runs.
struct ProfiledSite {
  DeviceIndex device{0};
  StreamId stream{0};        // the session's id of the stream
  BackendStream backend{0};  // 0: not on a stream (not timed on the device)
};

class DeviceProfiler {
  struct Profile;

 public:
  static constexpr uint64_t kDefaultCapacity = uint64_t{1} << 16;
  static constexpr uint64_t kMaxCapacity = uint64_t{1} << 24;
  static constexpr int kMaxProfilesPerSession = 64;
  // The daemon's memory a kept record takes, a bound of what was measured
  // (529 bytes a work record, with its events and the deque's share).
  static constexpr uint64_t kRecordBytes = 600;
  static constexpr uint64_t kDefaultMaxBytes = uint64_t{1} << 30;

  // `backend` must outlive this object.
  explicit DeviceProfiler(DeviceBackend* backend, uint64_t max_bytes = kDefaultMaxBytes);
  ~DeviceProfiler();
  DeviceProfiler(const DeviceProfiler&) = delete;
  DeviceProfiler& operator=(const DeviceProfiler&) = delete;

  struct Started {
    uint64_t id = 0;
    std::string token;  // 32 hex digits
  };
  // A profile owned by `owner`. INVALID_ARGUMENT for a capacity above
  // kMaxCapacity (0: kDefaultCapacity); RESOURCE_EXHAUSTED past
  // kMaxProfilesPerSession open ones of the owner.
  absl::StatusOr<Started> Start(SessionId owner, uint64_t capacity);
  // `session` (just opened) joins the profile `token` names. False, and
  // nothing changes, for a token of no open profile (a stale environment).
  bool Join(SessionId session, absl::string_view token);
  // Ends profile `id` of `owner` and returns its records, device times
  // resolved (waiting for work still queued). NOT_FOUND for a profile that
  // is not open or not the owner's.
  absl::StatusOr<DeviceProfile> Finish(SessionId owner, uint64_t id);

  // A window on live session `session`. FAILED_PRECONDITION when the session
  // is profiled already; INVALID_ARGUMENT for a capacity as Start.
  absl::StatusOr<uint64_t> BeginWindow(SessionId session, uint64_t capacity);
  // Ends window `id` (from BeginWindow) and returns its records; an unknown
  // id returns an empty profile.
  DeviceProfile EndWindow(uint64_t id);

  // Blocks until `until`, or until the window's session ends or Shutdown
  // runs, whichever comes first. False when it ended early.
  bool AwaitWindow(uint64_t id, absl::Time until);
  // The client's host side of window `id` of `session`, when it sends it; a
  // window that is not the session's ignores it.
  void OnHostProfile(SessionId session, uint64_t id, HostProfile host);
  // The host side once it came, or none at `deadline` (or when the session
  // ended first).
  std::optional<HostProfile> AwaitHostProfile(uint64_t id, absl::Time deadline);

  // `session` opened, of `tenant` (NamedTenant): the records charged to the
  // sessions of one tenant are bounded as one session's are.
  void AddSession(SessionId session, std::string tenant);
  // `session` ended: the profiles it owned are dropped; as a member it
  // records nothing more (its records stay in its profile), and a window on
  // it stops waiting.
  void SessionEnded(SessionId session);
  // The daemon is stopping: every window stops waiting.
  void Shutdown();

  // Recording. Each records only while the session is profiled.
  //
  // One piece of work from Begin (before it is queued) to End (after it is
  // queued or, for work the daemon does itself, done). Moves only.
  class Work {
   public:
    Work() = default;
    Work(Work&& other) noexcept;
    Work& operator=(Work&& other) noexcept;
    ~Work();
    // Whether the session is profiled (else Begin/End do nothing).
    explicit operator bool() const { return profile_ != nullptr; }

   private:
    friend class DeviceProfiler;
    DeviceProfiler* profiler_ = nullptr;
    std::shared_ptr<Profile> profile_;
    DeviceWorkRecord record_;
    BackendStream backend_{0};
    BackendEvent start_{0};
    BackendEvent end_{0};
  };
  // Marks the work's start (and, on a stream, records its start event there).
  // `profiler` may be null (nothing recorded).
  static Work Begin(DeviceProfiler* profiler, SessionId session, absl::string_view name,
                    const ProfiledSite& site, uint64_t bytes);
  // The work is queued on its stream: records its end event there.
  static void Queued(Work& work);
  // Ends it: `ran` false drops the record (the work was refused, nothing ran).
  // `on_device_too`: the work ran on the daemon's thread, not on a stream
  // (a group collective through host memory): its host time is its device
  // time.
  static void End(Work work, bool ran, bool on_device_too = false);

  // NVTX ranges of profiled sessions (after the push or pop succeeded).
  // `thread` is the client's (NvtxRanges): depths are on it.
  void RangePushed(SessionId session, uint64_t thread, absl::string_view message, int depth);
  void RangePopped(SessionId session, uint64_t thread, int depth);

  // The client's call the current thread serves, set by the RPC layer around
  // a call's body: the records name it.
  class CallScope {
   public:
    explicit CallScope(uint64_t call_id);
    ~CallScope();
    CallScope(const CallScope&) = delete;
    CallScope& operator=(const CallScope&) = delete;

   private:
    uint64_t previous_;
  };

 private:
  std::shared_ptr<Profile> ProfileOf(SessionId session);
  std::shared_ptr<Profile> FindProfile(uint64_t id);
  // Its sessions are profiled no more.
  void UnmapSessionsLocked(const std::shared_ptr<Profile>& profile)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Resolves the device times and releases the profile's events and streams.
  DeviceProfile Collect(Profile& profile);
  void ReleaseEvents(Profile& profile);
  absl::StatusOr<std::shared_ptr<Profile>> NewProfile(uint64_t capacity);
  // Counts one more record kept for `session` when the three bounds allow
  // it: all profiles, the session's, its tenant's.
  bool TakeRecord(SessionId session) ABSL_LOCKS_EXCLUDED(held_mu_);
  // `count` records of `session` are kept no more.
  void ReturnRecords(SessionId session, uint64_t count) ABSL_LOCKS_EXCLUDED(held_mu_);
  Work BeginWork(SessionId session, absl::string_view name, const ProfiledSite& site,
                 uint64_t bytes);
  void EndWork(Work work, bool ran, bool on_device_too);

  DeviceBackend* const backend_;
  const uint64_t max_records_;  // all profiles together
  // The profiles charged to one session, and to the sessions of one tenant.
  const uint64_t max_records_per_session_;
  // Records kept by open profiles, in all, per charged session and per
  // tenant. Taken after a profile's mu.
  struct Held {
    uint64_t records = 0;
    std::string tenant;
  };
  absl::Mutex held_mu_;
  uint64_t held_ ABSL_GUARDED_BY(held_mu_) = 0;
  absl::flat_hash_map<SessionId, Held> held_by_ ABSL_GUARDED_BY(held_mu_);
  absl::flat_hash_map<std::string, uint64_t> held_by_tenant_ ABSL_GUARDED_BY(held_mu_);
  absl::flat_hash_map<SessionId, std::string> tenant_of_ ABSL_GUARDED_BY(held_mu_);
  // Sessions profiled now: the hot path's one check.
  std::atomic<int> profiled_sessions_{0};
  absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Profile>> profiles_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<SessionId, std::shared_ptr<Profile>> of_session_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
};

// CLOCK_MONOTONIC nanoseconds, the clock of every profile record.
int64_t ProfileClockNanos();

}  // namespace gpumux
