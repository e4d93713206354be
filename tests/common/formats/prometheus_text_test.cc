#include "common/formats/prometheus_text.h"

#include <limits>

#include "gtest/gtest.h"

namespace gpumux {
namespace {

TEST(PrometheusTextTest, WritesFamiliesAndEscapes) {
  PrometheusText text;
  text.Family("gpumux_x_bytes", PrometheusText::Type::kGauge, "Help with \\ and\nnewline.");
  text.Sample("gpumux_x_bytes", {{"client", "a\"b\\c\nd"}, {"pod", ""}, {"gpu", "0"}}, 42);
  text.Sample("gpumux_x_bytes", {}, 7);
  text.Family("gpumux_y_seconds", PrometheusText::Type::kHistogram, "h");
  text.Sample("gpumux_y_seconds_sum", std::vector<PrometheusText::Label>{{"a", "b"}}, 0.25);
  EXPECT_EQ(text.text(),
            "# HELP gpumux_x_bytes Help with \\\\ and\\nnewline.\n"
            "# TYPE gpumux_x_bytes gauge\n"
            "gpumux_x_bytes{client=\"a\\\"b\\\\c\\nd\",gpu=\"0\"} 42\n"
            "gpumux_x_bytes 7\n"
            "# HELP gpumux_y_seconds h\n"
            "# TYPE gpumux_y_seconds histogram\n"
            "gpumux_y_seconds_sum{a=\"b\"} 0.25\n");
}

TEST(PrometheusTextTest, FloatsRoundTrip) {
  EXPECT_EQ(FormatPrometheusFloat(0.25), "0.25");
  EXPECT_EQ(FormatPrometheusFloat(5e-05), "5e-05");
  EXPECT_EQ(FormatPrometheusFloat(10), "10");
  EXPECT_EQ(FormatPrometheusFloat(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(FormatPrometheusFloat(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatPrometheusFloat(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatPrometheusFloat(std::numeric_limits<double>::quiet_NaN()), "NaN");
}

}  // namespace
}  // namespace gpumux
