#include "tests/http/metrics_scrape.h"

#include <cstdlib>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace gpumux::testing {
namespace {

// `name{k="v",...}`: false when it does not read.
bool ParseSeries(absl::string_view series, MetricSample& out) {
  const size_t brace = series.find('{');
  out.name = std::string(series.substr(0, brace));
  if (brace == absl::string_view::npos) return !out.name.empty();
  if (series.back() != '}') return false;
  absl::string_view rest = series.substr(brace + 1, series.size() - brace - 2);
  while (!rest.empty()) {
    const size_t eq = rest.find("=\"");
    if (eq == absl::string_view::npos) return false;
    std::string key(rest.substr(0, eq));
    std::string value;
    size_t i = eq + 2;
    for (; i < rest.size() && rest[i] != '"'; ++i) {
      if (rest[i] == '\\' && i + 1 < rest.size()) {
        ++i;
        value += rest[i] == 'n' ? '\n' : rest[i];
      } else {
        value += rest[i];
      }
    }
    if (i >= rest.size()) return false;
    out.labels[key] = value;
    rest = rest.substr(i + 1);
    if (!rest.empty() && rest.front() == ',') rest.remove_prefix(1);
  }
  return true;
}

}  // namespace

MetricsScrape::MetricsScrape(absl::string_view text) {
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (line.front() == '#') continue;
    const size_t space = line.rfind(' ');
    MetricSample sample;
    if (space == absl::string_view::npos || !ParseSeries(line.substr(0, space), sample)) {
      ADD_FAILURE() << "unreadable metrics line: " << line;
      continue;
    }
    const std::string value(line.substr(space + 1));
    char* end = nullptr;
    sample.value = std::strtod(value.c_str(), &end);
    if (end == value.c_str() || *end != '\0') {
      ADD_FAILURE() << "unreadable value in: " << line;
      continue;
    }
    samples_.push_back(std::move(sample));
  }
}

std::vector<MetricSample> MetricsScrape::Find(
    absl::string_view name, const std::map<std::string, std::string>& labels) const {
  std::vector<MetricSample> out;
  for (const MetricSample& sample : samples_) {
    if (sample.name != name) continue;
    bool match = true;
    for (const auto& [key, value] : labels) {
      auto it = sample.labels.find(key);
      match &= it != sample.labels.end() && it->second == value;
    }
    if (match) out.push_back(sample);
  }
  return out;
}

std::optional<double> MetricsScrape::Value(absl::string_view name,
                                           const std::map<std::string, std::string>& labels) const {
  std::vector<MetricSample> found = Find(name, labels);
  if (found.empty()) return std::nullopt;
  EXPECT_EQ(found.size(), 1u) << "more than one " << name << " sample matches";
  return found.front().value;
}

}  // namespace gpumux::testing
