#include "common/formats/memory_summary.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace gpumux {
namespace {

// Python's _format_size: the unit follows the "all" row's value (`pref`).
std::string FormatSizeCell(int64_t size, double pref) {
  static constexpr const char* kPrefixes[] = {"B  ", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  for (int next = 1; next < 6; ++next) {
    if (pref < 768 * 1024) break;
    unit = next;
    // Python's floor division.
    size = size >= 0 ? size / 1024 : -((-size + 1023) / 1024);
    pref /= 1024;
  }
  return absl::StrFormat("%6d %s", size, kPrefixes[unit]);
}

// Python's _format_count.
std::string FormatCountCell(int64_t count, double pref) {
  static constexpr const char* kPrefixes[] = {" ", "K", "M"};
  int unit = 0;
  for (int next = 1; next < 3; ++next) {
    if (pref < 750 * 1000) break;
    unit = next;
    count = count >= 0 ? count / 1000 : -((-count + 999) / 1000);
    pref /= 1000;
  }
  return absl::StrFormat("%7d %s ", count, kPrefixes[unit]);
}

using Formatter = std::string (*)(int64_t, double);

}  // namespace

std::string FormatMemorySummary(const std::map<std::string, int64_t>& stats, int device,
                                bool abbreviated) {
  auto get = [&](const std::string& key) -> int64_t {
    auto it = stats.find(key);
    return it == stats.end() ? 0 : it->second;
  };
  struct Metric {
    const char* key;
    const char* name;
    Formatter format;
  };
  static constexpr Metric kPoolMetrics[] = {
      {"allocated_bytes", "Allocated memory", FormatSizeCell},
      {"active_bytes", "Active memory", FormatSizeCell},
      {"requested_bytes", "Requested memory", FormatSizeCell},
      {"reserved_bytes", "GPU reserved memory", FormatSizeCell},
      {"inactive_split_bytes", "Non-releasable memory", FormatSizeCell},
      {"allocation", "Allocations", FormatCountCell},
      {"active", "Active allocs", FormatCountCell},
      {"segment", "GPU reserved segments", FormatCountCell},
      {"inactive_split", "Non-releasable allocs", FormatCountCell},
  };
  static constexpr Metric kFlatMetrics[] = {
      {"oversize_allocations", "Oversize allocations", FormatCountCell},
      {"oversize_segments", "Oversize GPU segments", FormatCountCell},
  };
  static constexpr const char* kFields[] = {"current", "peak", "allocated", "freed"};

  std::vector<std::string> lines;
  lines.push_back(std::string(75, '='));
  lines.push_back(
      absl::StrFormat(" %16s PyTorch CUDA memory summary, device ID %-17d ", "", device));
  lines.push_back(std::string(75, '-'));
  lines.push_back(absl::StrFormat("  %9s CUDA OOMs: %-12d | %6s cudaMalloc retries: %-8d  ", "",
                                  get("num_ooms"), "", get("num_alloc_retries")));
  lines.push_back(std::string(75, '='));
  lines.push_back("        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ");

  auto row = [&](const std::string& label, const std::string& prefix, const int64_t* pref,
                 Formatter format) {
    std::string line = absl::StrFormat(" %-21s ", label);
    for (int f = 0; f < 4; ++f) {
      absl::StrAppend(&line, "| ",
                      format(get(absl::StrCat(prefix, kFields[f])), static_cast<double>(pref[f])),
                      " ");
    }
    lines.push_back(std::move(line));
  };
  for (const Metric& m : kPoolMetrics) {
    lines.push_back(std::string(75, '-'));
    int64_t pref[4];
    for (int f = 0; f < 4; ++f) pref[f] = get(absl::StrCat(m.key, ".all.", kFields[f]));
    row(m.name, absl::StrCat(m.key, ".all."), pref, m.format);
    if (!abbreviated) {
      row("      from large pool", absl::StrCat(m.key, ".large_pool."), pref, m.format);
      row("      from small pool", absl::StrCat(m.key, ".small_pool."), pref, m.format);
    }
  }
  for (const Metric& m : kFlatMetrics) {
    lines.push_back(std::string(75, '-'));
    int64_t pref[4];
    for (int f = 0; f < 4; ++f) pref[f] = get(absl::StrCat(m.key, ".", kFields[f]));
    row(m.name, absl::StrCat(m.key, "."), pref, m.format);
  }
  lines.push_back(std::string(75, '='));
  return absl::StrCat("|", absl::StrJoin(lines, "|\n|"), "|\n");
}

std::string FormatMemorySummary(const DeviceStats& stats, int device, bool abbreviated) {
  std::map<std::string, int64_t> flat;
  for (auto& [key, value] : FlattenMemoryStats(stats)) flat.emplace(std::move(key), value);
  return FormatMemorySummary(flat, device, abbreviated);
}

}  // namespace gpumux
