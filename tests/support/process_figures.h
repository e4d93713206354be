#pragma once

// What /proc says of a process (resident memory, threads, open descriptors)
// and percentiles of latency samples, for the chaos test and the benchmarks
// that compare a daemon before and after a load.

#include <dirent.h>
#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace gpumux::testing {

struct ProcessFigures {
  int64_t rss_kb = 0;
  int64_t threads = 0;
  int64_t fds = 0;
};

inline ProcessFigures ReadProcessFigures(pid_t pid) {
  ProcessFigures figures;
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (status >> key) {
    if (key == "VmRSS:") status >> figures.rss_kb;
    if (key == "Threads:") status >> figures.threads;
  }
  if (DIR* dir = opendir(("/proc/" + std::to_string(pid) + "/fd").c_str())) {
    while (dirent* entry = readdir(dir)) figures.fds += entry->d_name[0] != '.';
    closedir(dir);
  }
  return figures;
}

// The `p` quantile (0 to 1) of `values`; 0 for none.
inline double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1,
                         static_cast<size_t>(p * static_cast<double>(values.size())))];
}

}  // namespace gpumux::testing
