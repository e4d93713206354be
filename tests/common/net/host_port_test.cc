// HOST:PORT as the listen flags take it.

#include "common/net/host_port.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::IsOk;
using ::gpumux::testing::StatusIs;
using ::testing::HasSubstr;

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

}  // namespace
}  // namespace gpumux
