#pragma once

// What `gpumux top` shows, apart from the terminal: one sample of the daemon
// (devices with their memory, sessions with theirs), how sessions sort, and
// the frame as lines of text. The interactive loop (top_command.cc) draws
// these lines with ncurses; --once prints them. Not thread-safe.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpumux/device_properties.h"
#include "gpumux/observer.h"
#include "gpumux/session_info.h"

namespace gpumux {

// The sort orders `s` cycles through, in this order; largest first, except
// by session id (ascending).
enum class TopSort { kAllocated, kReserved, kPeak, kSessionId };

const char* TopSortName(TopSort sort);
TopSort NextTopSort(TopSort sort);

struct TopDevice {
  DeviceProperties properties;
  // allocated_bytes.all.current and reserved_bytes.all.current of the device
  // (Observe.GetMemoryStats).
  uint64_t allocated_bytes = 0;
  uint64_t reserved_bytes = 0;
};

struct TopSample {
  std::vector<TopDevice> devices;
  std::vector<SessionInfo> sessions;
};

// Devices, each device's stats and the sessions, through `observer`; the
// first failure's status.
absl::StatusOr<TopSample> TakeTopSample(Observer& observer);

// The session's pod as the CLI shows it: "NAMESPACE/POD" from the labels
// "namespace" and "pod" (Kubernetes' names), "POD" without a namespace, "-"
// without a pod.
std::string PodOf(const SessionInfo& session);

// `sessions` in `sort` order, ties by session id.
void SortSessions(std::vector<SessionInfo>& sessions, TopSort sort);

struct TopFrame {
  std::vector<std::string> lines;
  // Index of the sessions' column header in `lines` (drawn reversed), -1 if none.
  int column_header = -1;
};

struct TopFrameOptions {
  std::string address;
  std::string clock;  // "HH:MM:SS", printed in the title
  TopSort sort = TopSort::kAllocated;
  double interval_seconds = 1;
  bool interactive = false;  // with the keys' help line
  // Lines are cut to this many columns; 0: not cut.
  int width = 0;
};

// The frame for `sample`, or for `error` (shown in the frame's place when
// the daemon could not be asked: it keeps retrying).
TopFrame FormatTopFrame(const absl::StatusOr<TopSample>& sample, const TopFrameOptions& options);

}  // namespace gpumux
