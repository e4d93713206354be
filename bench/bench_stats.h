#pragma once

// Percentiles of a benchmark's samples, as its name=value lines report them.

#include <algorithm>
#include <cstddef>
#include <vector>

namespace gpumux::bench {

// The sample at fraction `p` (0 to 1) of the sorted samples, rounding to the
// nearest rank; `samples` must not be empty.
inline double Percentile(std::vector<double> samples, double p) {
  std::sort(samples.begin(), samples.end());
  return samples[static_cast<size_t>(p * static_cast<double>(samples.size() - 1) + 0.5)];
}

}  // namespace gpumux::bench
