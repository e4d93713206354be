#pragma once

// A parsed /metrics page for the tests: each sample's name, labels and
// value, and lookups by name and a subset of labels.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace gpumux::testing {

struct MetricSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

class MetricsScrape {
 public:
  // Parses Prometheus's text format; a line it cannot read is an ADD_FAILURE.
  explicit MetricsScrape(absl::string_view text);

  // The samples named `name` whose labels include every one of `labels`.
  std::vector<MetricSample> Find(absl::string_view name,
                                 const std::map<std::string, std::string>& labels = {}) const;
  // The value of the one such sample; nullopt for none (a test failure for
  // more than one).
  std::optional<double> Value(absl::string_view name,
                              const std::map<std::string, std::string>& labels = {}) const;
  const std::vector<MetricSample>& samples() const { return samples_; }

 private:
  std::vector<MetricSample> samples_;
};

}  // namespace gpumux::testing
