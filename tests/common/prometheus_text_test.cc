#include "common/prometheus_text.h"

#include <limits>

#include "common/host_port.h"
#include "common/kubernetes_labels.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::IsOk;
using ::gpumux::testing::StatusIs;
using ::testing::HasSubstr;

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

TEST(HostPortTest, ParsesAndRefuses) {
  absl::StatusOr<HostPort> v4 = ParseHostPort("--metrics-listen", "0.0.0.0:9408");
  ASSERT_THAT(v4, IsOk());
  EXPECT_EQ(v4->host, "0.0.0.0");
  EXPECT_EQ(v4->port, 9408);
  absl::StatusOr<HostPort> v6 = ParseHostPort("--listen", "[::1]:0");
  ASSERT_THAT(v6, IsOk());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 0);
  EXPECT_THAT(ParseHostPort("--metrics-listen", "localhost"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--metrics-listen 'localhost': expected HOST:PORT")));
  EXPECT_THAT(ParseHostPort("--listen", "h:65536"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a number in 0-65535")));
  EXPECT_THAT(ParseHostPort("--listen", "h:-1"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseHostPort("--listen", ":80"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseHostPort("--listen", "::1:80"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("brackets")));
  EXPECT_THAT(ParseHostPort("--listen", "[]:80"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(KubernetesLabelsTest, ShortKeysWinOverTheRuntimes) {
  KubernetesIdentity id = KubernetesIdentityOf({{"io.kubernetes.pod.name", "long"},
                                                {"pod", "short"},
                                                {"io.kubernetes.pod.namespace", "ns"},
                                                {"io.kubernetes.container.name", "c"}});
  EXPECT_EQ(id.pod, "short");
  EXPECT_EQ(id.pod_namespace, "ns");
  EXPECT_EQ(id.container, "c");
  KubernetesIdentity none = KubernetesIdentityOf({{"app", "x"}});
  EXPECT_EQ(none.pod, "");
  EXPECT_EQ(none.pod_namespace, "");
  EXPECT_EQ(none.container, "");
}

}  // namespace
}  // namespace gpumux
