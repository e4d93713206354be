#pragma once

// The memory libgpumux's profiler writes its host side into: a header, a
// table of API functions with exact totals and a ring of call spans. Under
// `gpumux bottleneck` it is a file the CLI made (GPUMUX_PROFILE names it),
// mapped shared, so that what a program recorded survives the program's
// crash; when a live session is profiled (`gpumux profile`) it is anonymous
// memory. The layout is plain data with atomics, written by any number of
// threads and read by another process meanwhile.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/profile_data.h"

namespace gpumux {

class ProfileRegion {
 public:
  static constexpr uint32_t kVersion = 2;
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
  // bytes; "" for none). INVALID_ARGUMENT for a capacity of 0 or above
  // kMaxCapacity or a token too long; the errno's status when the file cannot
  // be made.
  static absl::Status CreateFile(const std::string& path, uint64_t capacity,
                                 absl::string_view token);
  // Maps an existing region file for writing. INVALID_ARGUMENT when it is
  // not one (magic, version, size).
  static absl::StatusOr<ProfileRegion> MapFile(const std::string& path);
  // An anonymous region of `capacity` spans.
  static absl::StatusOr<ProfileRegion> Anonymous(uint64_t capacity);

  ProfileRegion(ProfileRegion&& other) noexcept;
  ProfileRegion& operator=(ProfileRegion&& other) noexcept;
  ~ProfileRegion();

  std::string token() const;
  uint64_t capacity() const;
  int64_t start_ns() const;

  // Recording (thread-safe, lock-free).
  // Names the function at `index` (below kMaxFunctions; its calls count
  // there); a no-op once named.
  void Define(uint32_t index, absl::string_view name, bool waits);
  // A new call: its id (1, 2, ...), which also reserves its span's slot.
  uint64_t BeginCall();
  uint32_t NewThread();
  // Records call `call_id` of `function` on `thread` (`waits`: it waited
  // for the device) into the function's totals and its span's slot.
  void EndCall(uint64_t call_id, uint32_t function, uint32_t thread, int64_t start_ns,
               int64_t end_ns, bool waits);
  // The program's exit (normal or exit()): the window's end.
  void MarkEnd(int64_t end_ns);

  // Reading (thread-safe against writers: spans being written are skipped).
  // Where a window starts: the time, the next call's id, the totals so far.
  struct Mark {
    int64_t at_ns = 0;
    uint64_t next_call = 1;
    HostProfile totals;
  };
  Mark MarkNow() const;
  // Everything since the region began, or since `from` (spans that began
  // after it, totals less its totals).
  HostProfile Read(const Mark* from = nullptr) const;

 private:
  ProfileRegion(void* base, size_t bytes);
  // Writes an empty region's header (fresh zeroed memory).
  void Initialize(uint64_t capacity, absl::string_view token);
  Header* header() const;
  FunctionSlot* functions() const;
  SpanSlot* spans() const;

  void* base_ = nullptr;
  size_t bytes_ = 0;
};

// Reads the region file at `path` (as `gpumux bottleneck` does after the
// program exits). Also returns its token through `token` when given.
absl::StatusOr<HostProfile> ReadProfileFile(const std::string& path, std::string* token = nullptr);

// CLOCK_MONOTONIC in nanoseconds: the clock both sides of a profile use.
int64_t MonotonicNanos();

}  // namespace gpumux
