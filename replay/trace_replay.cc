#include "replay/trace_replay.h"

#include <zlib.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/status_macros.h"

namespace gpumux {
namespace {

constexpr absl::string_view kHeader = "action,addr,size,stream";

// gzFile owner.
class GzReader {
 public:
  explicit GzReader(gzFile file) : file_(file) {}
  ~GzReader() {
    if (file_ != nullptr) gzclose(file_);
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Next line without its newline; false at the end of the file.
  bool ReadLine(std::string* line) {
    line->clear();
    char buf[4096];
    while (gzgets(file_, buf, sizeof(buf)) != nullptr) {
      line->append(buf);
      if (!line->empty() && line->back() == '\n') {
        line->pop_back();
        if (!line->empty() && line->back() == '\r') line->pop_back();
        return true;
      }
    }
    return !line->empty();
  }
  bool failed() const {
    int errnum = 0;
    gzerror(file_, &errnum);
    return errnum != Z_OK && errnum != Z_STREAM_END;
  }

 private:
  gzFile file_;
};

// The replay loop works on dense slots instead of trace addresses.
struct Step {
  bool alloc;
  uint32_t slot;
  uint64_t size;
  uint64_t stream;
};

std::vector<Step> ToSteps(const std::vector<TraceEvent>& events, size_t* slot_count) {
  std::vector<Step> steps;
  steps.reserve(events.size());
  absl::flat_hash_map<uint64_t, uint32_t> live;  // trace address -> slot
  uint32_t next_slot = 0;
  for (const TraceEvent& e : events) {
    if (e.action == TraceEvent::Action::kAlloc) {
      live[e.addr] = next_slot;
      steps.push_back({true, next_slot++, e.size, e.stream});
    } else if (auto it = live.find(e.addr); it != live.end()) {
      steps.push_back({false, it->second, 0, 0});
      live.erase(it);
    }
  }
  *slot_count = next_slot;
  return steps;
}

int64_t StatOr0(const std::map<std::string, int64_t>& stats, const std::string& key) {
  auto it = stats.find(key);
  return it == stats.end() ? 0 : it->second;
}

}  // namespace

absl::StatusOr<std::vector<TraceEvent>> LoadTrace(absl::string_view path) {
  const std::string path_str(path);
  gzFile file = gzopen(path_str.c_str(), "rb");
  if (file == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("cannot open trace ", path, ": ", std::strerror(errno)));
  }
  GzReader reader(file);
  std::string line;
  if (!reader.ReadLine(&line) || line != kHeader) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ":1: expected the header \"", kHeader, "\", got \"", line, "\""));
  }
  std::vector<TraceEvent> events;
  absl::flat_hash_map<uint64_t, bool> allocated;  // addresses allocated so far in the trace
  for (int line_no = 2; reader.ReadLine(&line); ++line_no) {
    if (line.empty()) continue;
    std::vector<absl::string_view> fields = absl::StrSplit(line, ',');
    TraceEvent event{};
    uint64_t addr = 0;
    uint64_t size = 0;
    uint64_t stream = 0;
    if (fields.size() != 4 || !absl::SimpleAtoi(fields[1], &addr) ||
        !absl::SimpleAtoi(fields[2], &size) || !absl::SimpleAtoi(fields[3], &stream)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_no,
                       ": expected action,addr,size,stream with integers, got \"", line, "\""));
    }
    event.addr = addr;
    event.size = size;
    event.stream = stream;
    const absl::string_view action = fields[0];
    if (action == "alloc") {
      event.action = TraceEvent::Action::kAlloc;
      allocated[addr] = true;
    } else if (action == "free_completed") {
      // Frees of blocks allocated before recording began have no alloc.
      auto it = allocated.find(addr);
      if (it == allocated.end() || !it->second) continue;
      it->second = false;
      event.action = TraceEvent::Action::kFree;
    } else if (action == "free_requested" || action == "segment_alloc" ||
               action == "segment_free" || action == "segment_map" || action == "segment_unmap" ||
               action == "snapshot" || action == "oom") {
      continue;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_no, ": unknown action \"", action, "\""));
    }
    events.push_back(event);
  }
  if (reader.failed()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": corrupt gzip stream"));
  }
  return events;
}

absl::StatusOr<ReplayResult> Replay(const std::vector<TraceEvent>& events, ReplayTarget& target,
                                    int repeat) {
  if (repeat < 1) {
    return absl::InvalidArgumentError(absl::StrCat("repeat must be at least 1, got ", repeat));
  }
  size_t slot_count = 0;
  const std::vector<Step> steps = ToSteps(events, &slot_count);
  std::vector<uint64_t> handles(slot_count);
  std::vector<bool> live(slot_count);
  ReplayResult result;
  using Clock = std::chrono::steady_clock;
  Clock::duration elapsed{};
  for (int round = 0; round < repeat; ++round) {
    const Clock::time_point start = Clock::now();
    for (const Step& step : steps) {
      if (step.alloc) {
        absl::StatusOr<uint64_t> handle = target.Allocate(step.size, step.stream);
        if (!handle.ok()) {
          return absl::Status(handle.status().code(),
                              absl::StrCat("replay round ", round + 1, ": allocating ", step.size,
                                           " bytes: ", handle.status().message()));
        }
        handles[step.slot] = *handle;
        live[step.slot] = true;
      } else {
        GPUMUX_RETURN_IF_ERROR(target.Free(handles[step.slot]));
        live[step.slot] = false;
      }
    }
    elapsed += Clock::now() - start;
    result.operations += static_cast<int64_t>(steps.size());
    if (round == 0) {
      GPUMUX_ASSIGN_OR_RETURN(auto stats, target.Stats());
      result.peak_requested = StatOr0(stats, "requested_bytes.all.peak");
      result.peak_allocated = StatOr0(stats, "allocated_bytes.all.peak");
      result.peak_reserved = StatOr0(stats, "reserved_bytes.all.peak");
      result.device_allocs = StatOr0(stats, "num_device_alloc");
      result.device_frees = StatOr0(stats, "num_device_free");
    }
    // What the trace never freed is freed between rounds, untimed.
    for (size_t slot = 0; slot < slot_count; ++slot) {
      if (!live[slot]) continue;
      GPUMUX_RETURN_IF_ERROR(target.Free(handles[slot]));
      live[slot] = false;
    }
  }
  result.seconds = std::chrono::duration<double>(elapsed).count();
  return result;
}

std::string FormatReplayResult(const ReplayResult& r) {
  const double ratio =
      r.peak_requested > 0 ? static_cast<double>(r.peak_reserved) / r.peak_requested : 0;
  const double ops_per_second = r.seconds > 0 ? r.operations / r.seconds : 0;
  return absl::StrFormat(
      "peak_allocated=%d\n"
      "device_allocs=%d\n"
      "device_frees=%d\n"
      "operations=%d\n"
      "seconds=%.6f\n"
      "peak_requested=%d\n"
      "peak_reserved=%d\n"
      "reserved_over_requested=%.4f\n"
      "ops_per_second=%.0f\n",
      r.peak_allocated, r.device_allocs, r.device_frees, r.operations, r.seconds, r.peak_requested,
      r.peak_reserved, ratio, ops_per_second);
}

}  // namespace gpumux
