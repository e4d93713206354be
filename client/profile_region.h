#pragma once

// The memory libgpumux's profiler writes its host side into: a header, a
// table of API functions with exact totals and a ring of call spans. Under
// `gpumux bottleneck` it is a file the CLI made (GPUMUX_PROFILE names it),
// mapped shared, so that what a program recorded survives the program's
// crash; when a live session is profiled (`gpumux profile`) it is anonymous
// memory. The layout is plain data with atomics, written by any number of
// threads and read by another process meanwhile.

#include <time.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gpumux/common/profile_data.h"

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace gpumux {

// CLOCK_MONOTONIC in nanoseconds: the clock both sides of a profile use.
inline int64_t MonotonicNanos() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return int64_t{now.tv_sec} * 1000000000 + now.tv_nsec;
}

// What a region stamps calls with. Two stamps a call are most of what a
// recorded call costs, and CLOCK_MONOTONIC takes twice as long to read as
// the TSC (24 vs 10 ns here), so a region counts TSC ticks where the kernel
// keeps its own time with the TSC (its clocksource is "tsc": one rate on
// every CPU, the same counter in every process) and converts them to
// CLOCK_MONOTONIC nanoseconds when it is read, against two points it took
// of both clocks. Elsewhere (another clocksource, not x86-64) ticks are
// CLOCK_MONOTONIC nanoseconds.
enum class ProfileClock : uint32_t { kMonotonic = 0, kTsc = 1 };

// The clock a region made on this machine uses (read once).
ProfileClock MachineProfileClock();

inline int64_t ProfileTicks(ProfileClock clock) {
#if defined(__x86_64__)
  if (clock == ProfileClock::kTsc) return static_cast<int64_t>(__rdtsc());
#endif
  return MonotonicNanos();
}

class ProfileRegion {
 public:
  static constexpr uint32_t kVersion = 3;
  static constexpr uint32_t kMaxFunctions = 256;
  static constexpr size_t kNameBytes = 48;
  static constexpr size_t kTokenBytes = 64;
  // Spans kept by default (65,536 x 40 bytes: 2.5 MiB).
  static constexpr uint64_t kDefaultCapacity = uint64_t{1} << 16;
  static constexpr uint64_t kMaxCapacity = uint64_t{1} << 24;

  struct Header;
  struct FunctionSlot;
  struct SpanSlot;

  // Creates (or truncates) `path` as an empty region of `capacity` spans
  // holding `token` (the daemon's profile token, at most kTokenBytes - 1
  // bytes; "" for none), stamped with `clock`. INVALID_ARGUMENT for a
  // capacity of 0 or above kMaxCapacity or a token too long; the errno's
  // status when the file cannot be made.
  static absl::Status CreateFile(const std::string& path, uint64_t capacity,
                                 absl::string_view token,
                                 ProfileClock clock = MachineProfileClock());
  // Maps an existing region file for writing. INVALID_ARGUMENT when it is
  // not one (magic, version, size).
  static absl::StatusOr<ProfileRegion> MapFile(const std::string& path);
  // An anonymous region of `capacity` spans.
  static absl::StatusOr<ProfileRegion> Anonymous(uint64_t capacity,
                                                 ProfileClock clock = MachineProfileClock());

  ProfileRegion(ProfileRegion&& other) noexcept;
  ProfileRegion& operator=(ProfileRegion&& other) noexcept;
  ~ProfileRegion();

  std::string token() const;
  uint64_t capacity() const;
  int64_t start_ns() const;

  // Recording (thread-safe, lock-free). Times are the region's ticks.
  int64_t Now() const { return ProfileTicks(clock_); }
  // Names the function at `index` (below kMaxFunctions; its calls count
  // there); a no-op once named.
  void Define(uint32_t index, absl::string_view name, bool waits);
  // A new call: its id (1, 2, ...), which also reserves its span's slot.
  uint64_t BeginCall();
  uint32_t NewThread();
  // Records call `call_id` of `function` on `thread` (`waits`: it waited
  // for the device) into the function's totals and its span's slot.
  void EndCall(uint64_t call_id, uint32_t function, uint32_t thread, int64_t start_ticks,
               int64_t end_ticks, bool waits);
  // The program's exit (normal or exit()): the window's end.
  void MarkEnd(int64_t end_ns);

  // Reading (thread-safe against writers: spans being written are skipped).
  // Where a window starts: the time, the next call's id, and each function
  // slot's counts so far (in ticks: a window's totals are told apart before
  // they are converted).
  struct Counts {
    uint64_t calls = 0;
    int64_t total_ticks = 0;
    int64_t waited_ticks = 0;
  };
  struct Mark {
    int64_t at_ns = 0;
    uint64_t next_call = 1;
    std::vector<Counts> functions;
  };
  Mark MarkNow() const;
  // Everything since the region began, or since `from` (spans that began
  // after it, totals less its totals).
  HostProfile Read(const Mark* from = nullptr) const;

 private:
  ProfileRegion(void* base, size_t bytes);
  // Writes an empty region's header (fresh zeroed memory).
  void Initialize(uint64_t capacity, absl::string_view token, ProfileClock clock);
  Header* header() const;
  FunctionSlot* functions() const;
  SpanSlot* spans() const;

  void* base_ = nullptr;
  size_t bytes_ = 0;
  ProfileClock clock_ = ProfileClock::kMonotonic;  // the header's, kept at hand
};

// Reads the region file at `path` (as `gpumux bottleneck` does after the
// program exits). Also returns its token through `token` when given.
absl::StatusOr<HostProfile> ReadProfileFile(const std::string& path, std::string* token = nullptr);

}  // namespace gpumux
