#include "client/host_profiler.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace gpumux {

// Each thread's profiled call: how deep in libgpumux it is (only the
// outermost call is recorded) and that call's id.
struct ThreadCalls {
  uint32_t thread = 0;  // 0: not numbered yet in `region`
  const ProfileRegion* region = nullptr;
  int depth = 0;
  uint64_t call_id = 0;
};

namespace {

struct Function {
  std::string name;
  bool waits;
};

// The process's profiling state: the function names (their indexes are the
// slots they count in, in every region), GPUMUX_PROFILE's region, and the
// window region with its open windows.
struct State {
  absl::Mutex mu;
  std::vector<Function> functions ABSL_GUARDED_BY(mu);
  std::unique_ptr<ProfileRegion> file ABSL_GUARDED_BY(mu);
  std::unique_ptr<ProfileRegion> window ABSL_GUARDED_BY(mu);
  std::vector<std::unique_ptr<ProfileRegion>> outgrown ABSL_GUARDED_BY(mu);
  int open_windows ABSL_GUARDED_BY(mu) = 0;
};

State& TheState() {
  static State* state = new State();  // never destroyed: calls may run at exit
  return *state;
}

thread_local ThreadCalls calls_of_thread;

// Which functions always wait, read by every profiled call without the lock.
std::atomic<bool> function_waits[ProfileRegion::kMaxFunctions];

void DefineAll(ProfileRegion& region, const std::vector<Function>& functions) {
  for (size_t i = 0; i < functions.size(); ++i) {
    region.Define(static_cast<uint32_t>(i), functions[i].name, functions[i].waits);
  }
}

// GPUMUX_PROFILE, read before main: profiling covers the whole program.
void StartFromEnvironment() {
  const char* path = std::getenv("GPUMUX_PROFILE");
  if (path == nullptr || *path == '\0') return;
  absl::StatusOr<ProfileRegion> region = ProfileRegion::MapFile(path);
  if (absl::IsNotFound(region.status())) {
    absl::Status made = ProfileRegion::CreateFile(path, ProfileRegion::kDefaultCapacity, "");
    region = made.ok() ? ProfileRegion::MapFile(path) : made;
  }
  if (!region.ok()) {
    // Before main: no logger is set up yet, and the program runs on.
    std::fprintf(stderr, "libgpumux: GPUMUX_PROFILE: %s; profiling is off\n",
                 std::string(region.status().message()).c_str());
    return;
  }
  State& state = TheState();
  absl::MutexLock lock(&state.mu);
  state.file = std::make_unique<ProfileRegion>(*std::move(region));
  DefineAll(*state.file, state.functions);
  HostProfiler::Activate(state.file.get());
}

// The program's end, for the profile's wall time: exit() and a return from
// main run this; a crash does not, and the reader falls back on the last
// call's end.
void MarkFileEnd() {
  State& state = TheState();
  absl::MutexLock lock(&state.mu);
  if (state.file != nullptr) state.file->MarkEnd(MonotonicNanos());
}

[[maybe_unused]] const bool started_from_environment = [] {
  StartFromEnvironment();
  std::atexit(MarkFileEnd);
  return true;
}();

}  // namespace

std::atomic<ProfileRegion*> HostProfiler::active_{nullptr};

void HostProfiler::Activate(ProfileRegion* region) {
  // Release: a thread that sees the region sees its names defined.
  active_.store(region, std::memory_order_release);
}

uint32_t HostProfiler::FunctionIndex(absl::string_view name, bool waits) {
  State& state = TheState();
  absl::MutexLock lock(&state.mu);
  for (size_t i = 0; i < state.functions.size(); ++i) {
    if (state.functions[i].name == name) return static_cast<uint32_t>(i);
  }
  if (state.functions.size() >= ProfileRegion::kMaxFunctions - 1) {
    // The table is full (libgpumux has far fewer functions): the rest share
    // its last slot.
    state.functions.resize(ProfileRegion::kMaxFunctions, Function{"(other)", false});
    return ProfileRegion::kMaxFunctions - 1;
  }
  const uint32_t index = static_cast<uint32_t>(state.functions.size());
  state.functions.push_back(Function{std::string(name), waits});
  function_waits[index].store(waits, std::memory_order_relaxed);
  if (state.file != nullptr) state.file->Define(index, name, waits);
  if (state.window != nullptr) state.window->Define(index, name, waits);
  return index;
}

bool HostProfiler::FunctionWaits(uint32_t function) {
  return function < ProfileRegion::kMaxFunctions &&
         function_waits[function].load(std::memory_order_relaxed);
}

std::string HostProfiler::Token() {
  State& state = TheState();
  absl::MutexLock lock(&state.mu);
  return state.file != nullptr ? state.file->token() : std::string();
}

absl::StatusOr<ProfileRegion::Mark> HostProfiler::BeginWindow(uint64_t capacity) {
  State& state = TheState();
  absl::MutexLock lock(&state.mu);
  if (state.file != nullptr) {
    ++state.open_windows;
    return state.file->MarkNow();
  }
  if (state.window == nullptr || (state.open_windows == 0 && state.window->capacity() < capacity)) {
    // One region serves every window (each reads from its own mark). A
    // region is never unmapped: a call that began in it may still be ending
    // long after its window (a synchronize), so a smaller one outgrown stays.
    absl::StatusOr<ProfileRegion> region = ProfileRegion::Anonymous(capacity);
    if (!region.ok()) return region.status();
    if (state.window != nullptr) state.outgrown.push_back(std::move(state.window));
    state.window = std::make_unique<ProfileRegion>(*std::move(region));
    DefineAll(*state.window, state.functions);
  }
  if (state.open_windows == 0) Activate(state.window.get());
  ++state.open_windows;
  return state.window->MarkNow();
}

HostProfile HostProfiler::EndWindow(const ProfileRegion::Mark& begin) {
  State& state = TheState();
  absl::MutexLock lock(&state.mu);
  ProfileRegion* region = state.file != nullptr ? state.file.get() : state.window.get();
  HostProfile profile = region->Read(&begin);
  if (--state.open_windows == 0 && state.file == nullptr) Activate(nullptr);
  return profile;
}

uint64_t HostProfiler::CurrentCall() { return calls_of_thread.call_id; }

void ProfiledCall::Begin(ProfileRegion* region, uint32_t function) {
  ThreadCalls& calls = calls_of_thread;
  thread_ = &calls;
  // Only the calls the program made: an API function libgpumux calls on its
  // own way (Allocate asking CurrentStream) is part of its caller's time.
  if (calls.depth++ > 0) return;
  if (calls.region != region) {
    // Numbered per region: a window counts the threads it saw.
    calls.region = region;
    calls.thread = region->NewThread();
  }
  region_ = region;
  function_ = function;
  waits_ = HostProfiler::FunctionWaits(function);
  call_id_ = region->BeginCall();
  calls.call_id = call_id_;
  start_ticks_ = region->Now();
}

void ProfiledCall::Leave() {
  --thread_->depth;
  if (region_ == nullptr) return;
  const int64_t end_ticks = region_->Now();
  thread_->call_id = 0;
  region_->EndCall(call_id_, function_, thread_->thread, start_ticks_, end_ticks, waits_);
}

void ProfiledCall::Waited() {
  if (region_ != nullptr) waits_ = true;
}

}  // namespace gpumux
