#pragma once

// PrometheusText: writes Prometheus's text exposition format (version 0.0.4,
// what /metrics serves): each metric family once, its HELP and TYPE lines
// first, then its samples. Label values and help texts are escaped as the
// format says; names are the caller's (they must be valid metric and label
// names). Not thread-safe: one writer per page.

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace gpumux {

class PrometheusText {
 public:
  enum class Type { kCounter, kGauge, kHistogram };
  using Label = std::pair<absl::string_view, absl::string_view>;

  // Starts the family `name`: its samples follow before the next Family.
  void Family(absl::string_view name, Type type, absl::string_view help);

  // One sample of the current family. `name` is the family's, or for a
  // histogram its _bucket, _sum or _count series. Labels with an empty value
  // are left out (Prometheus reads an empty label as an absent one).
  void Sample(absl::string_view name, std::initializer_list<Label> labels, uint64_t value);
  void Sample(absl::string_view name, const std::vector<Label>& labels, uint64_t value);
  void Sample(absl::string_view name, const std::vector<Label>& labels, double value);

  const std::string& text() const { return text_; }
  std::string Take() { return std::move(text_); }

 private:
  void Begin(absl::string_view name, const Label* labels, size_t count);

  std::string text_;
};

// `value` as the format writes floats: shortest round-trip digits, "+Inf",
// "-Inf" or "NaN".
std::string FormatPrometheusFloat(double value);

}  // namespace gpumux
