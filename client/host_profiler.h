#pragma once

// libgpumux's profiler: every public API call, when profiling is on, is a
// span in a ProfileRegion (client/profile_region.h) and adds to its
// function's totals. Off, a call pays one load and one branch.
//
// It is on for the whole process from its start when GPUMUX_PROFILE names a
// region file (`gpumux bottleneck` makes one and sets it; a missing file is
// made with the default size), and for a window while the daemon profiles one
// of the process's sessions (`gpumux profile`). Profiling is the process's,
// as the environment variable is: this is the one piece of process-wide
// state in libgpumux, and its API is static for that reason. Thread-safe.

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/profile_region.h"
#include "gpumux/common/profile_data.h"

namespace gpumux {

class HostProfiler {
 public:
  // The region calls are recorded into; nullptr when profiling is off.
  static ProfileRegion* Active() { return active_.load(std::memory_order_acquire); }

  // The index of API function `name` (the same for the same name); `waits`:
  // its calls block until device work completes (synchronize-like).
  static uint32_t FunctionIndex(absl::string_view name, bool waits);

  // GPUMUX_PROFILE's region token ("" when none), which the client sends
  // when it opens a session so that the daemon records the session's device
  // work into the profile `gpumux bottleneck` started.
  static std::string Token();

  // A window for `gpumux profile`: turns recording on (into an anonymous
  // region of `capacity` spans, unless GPUMUX_PROFILE's is on already) and
  // returns where the window starts. Windows may overlap (two sessions of the
  // process profiled at once); recording stays on until the last ends.
  static absl::StatusOr<ProfileRegion::Mark> BeginWindow(uint64_t capacity);
  // What was recorded since `begin`; turns recording off after the last
  // window unless GPUMUX_PROFILE keeps it on.
  static HostProfile EndWindow(const ProfileRegion::Mark& begin);

  // The innermost profiled call open on this thread (0: none or off), which
  // the client sends with each RPC so the daemon's records name it.
  static uint64_t CurrentCall();

  // Whether function `function` always waits (FunctionIndex's `waits`).
  static bool FunctionWaits(uint32_t function);
  // Makes `region` the one calls record into (nullptr: off).
  static void Activate(ProfileRegion* region);

 private:
  static std::atomic<ProfileRegion*> active_;
};

struct ThreadCalls;  // a thread's profiled calls (host_profiler.cc)

// One API call, from construction to destruction, when profiling is on and
// the program made it (calls libgpumux makes itself count in their caller).
class ProfiledCall {
 public:
  explicit ProfiledCall(uint32_t function) {
    if (ProfileRegion* region = HostProfiler::Active()) Begin(region, function);
  }
  ~ProfiledCall() {
    if (thread_ != nullptr) Leave();
  }
  ProfiledCall(const ProfiledCall&) = delete;
  ProfiledCall& operator=(const ProfiledCall&) = delete;

  // This call waited for device work after all (a copy with wait=true).
  void Waited();

 private:
  void Begin(ProfileRegion* region, uint32_t function);
  // Leaves the thread's depth and records the call when it is recorded.
  void Leave();

  ProfileRegion* region_ = nullptr;  // set when this call is recorded
  // The thread's calls, while this call counts in its depth. Looked up
  // once: in the shared libgpumux each thread_local access costs a
  // __tls_get_addr call, and initial-exec TLS is no way out (it would put
  // all of the library's thread_locals, gRPC's among them, into the static
  // TLS block, which a dlopen of the library then fails to fit).
  ThreadCalls* thread_ = nullptr;
  uint64_t call_id_ = 0;
  int64_t start_ticks_ = 0;
  uint32_t function_ = 0;
  bool waits_ = false;
};

}  // namespace gpumux

// At the top of a public libgpumux function: profiles the call as `name`
// ("memory::Allocate"). GPUMUX_PROFILED_WAIT for functions that always wait
// for the device.
#define GPUMUX_PROFILED_IMPL_(var, name, waits)                                              \
  static const uint32_t var##_function = ::gpumux::HostProfiler::FunctionIndex(name, waits); \
  ::gpumux::ProfiledCall var(var##_function)
#define GPUMUX_PROFILED(name) GPUMUX_PROFILED_IMPL_(gpumux_profiled_call_, name, false)
#define GPUMUX_PROFILED_WAIT(name) GPUMUX_PROFILED_IMPL_(gpumux_profiled_call_, name, true)
