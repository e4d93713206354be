#include "common/formats/prometheus_text.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace gpumux {
namespace {

constexpr absl::string_view TypeName(PrometheusText::Type type) {
  switch (type) {
    case PrometheusText::Type::kCounter:
      return "counter";
    case PrometheusText::Type::kGauge:
      return "gauge";
    case PrometheusText::Type::kHistogram:
      return "histogram";
  }
  return "untyped";
}

// HELP escapes backslash and newline; label values also the double quote.
void AppendEscaped(std::string& out, absl::string_view text, bool quote) {
  for (char c : text) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '"':
        out += quote ? "\\\"" : "\"";
        break;
      default:
        out += c;
    }
  }
}

}  // namespace

std::string FormatPrometheusFloat(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // %.17g round-trips every double; shorter forms first, so 0.25 stays 0.25.
  char buffer[32];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  return buffer;
}

void PrometheusText::Family(absl::string_view name, Type type, absl::string_view help) {
  absl::StrAppend(&text_, "# HELP ", name, " ");
  AppendEscaped(text_, help, /*quote=*/false);
  absl::StrAppend(&text_, "\n# TYPE ", name, " ", TypeName(type), "\n");
}

void PrometheusText::Begin(absl::string_view name, const Label* labels, size_t count) {
  text_.append(name.data(), name.size());
  bool any = false;
  for (size_t i = 0; i < count; ++i) {
    if (labels[i].second.empty()) continue;
    text_ += any ? ',' : '{';
    any = true;
    absl::StrAppend(&text_, labels[i].first, "=\"");
    AppendEscaped(text_, labels[i].second, /*quote=*/true);
    text_ += '"';
  }
  if (any) text_ += '}';
  text_ += ' ';
}

void PrometheusText::Sample(absl::string_view name, std::initializer_list<Label> labels,
                            uint64_t value) {
  Begin(name, labels.begin(), labels.size());
  absl::StrAppend(&text_, value, "\n");
}

void PrometheusText::Sample(absl::string_view name, const std::vector<Label>& labels,
                            uint64_t value) {
  Begin(name, labels.data(), labels.size());
  absl::StrAppend(&text_, value, "\n");
}

void PrometheusText::Sample(absl::string_view name, const std::vector<Label>& labels,
                            double value) {
  Begin(name, labels.data(), labels.size());
  absl::StrAppend(&text_, FormatPrometheusFloat(value), "\n");
}

}  // namespace gpumux
