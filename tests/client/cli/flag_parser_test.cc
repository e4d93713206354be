#include "client/cli/flag_parser.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::IsOkAndHolds;
using ::gpumux::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::Optional;

const std::vector<FlagSpec> kSpecs = {{"device", true}, {"json", false}};

TEST(ParseFlagsTest, ValuesBooleansAndPositionals) {
  absl::StatusOr<ParsedArgs> parsed =
      ParseFlags({"trace.csv.gz", "--device", "1", "--json", "-"}, kSpecs);
  ASSERT_OK(parsed);
  EXPECT_THAT(parsed->positional, ElementsAre("trace.csv.gz", "-"));
  EXPECT_THAT(parsed->Get("device"), Optional(std::string("1")));
  EXPECT_TRUE(parsed->Has("json"));
  EXPECT_FALSE(parsed->Get("nope").has_value());
}

TEST(ParseFlagsTest, EqualsFormAndLastOneWins) {
  absl::StatusOr<ParsedArgs> parsed = ParseFlags({"--device=2", "--device", "3"}, kSpecs);
  ASSERT_OK(parsed);
  EXPECT_THAT(parsed->Get("device"), Optional(std::string("3")));
  // A value may itself start with '-'.
  parsed = ParseFlags({"--device", "-1"}, kSpecs);
  ASSERT_OK(parsed);
  EXPECT_THAT(parsed->Get("device"), Optional(std::string("-1")));
}

TEST(ParseFlagsTest, DoubleDashEndsFlags) {
  absl::StatusOr<ParsedArgs> parsed = ParseFlags({"--json", "--", "--device", "x"}, kSpecs);
  ASSERT_OK(parsed);
  EXPECT_THAT(parsed->positional, ElementsAre("--device", "x"));
  EXPECT_FALSE(parsed->Has("device"));
}

TEST(ParseFlagsTest, Errors) {
  EXPECT_THAT(ParseFlags({"--bogus"}, kSpecs),
              StatusIs(absl::StatusCode::kInvalidArgument, "unknown flag --bogus"));
  EXPECT_THAT(ParseFlags({"--device"}, kSpecs),
              StatusIs(absl::StatusCode::kInvalidArgument, "--device needs a value"));
  EXPECT_THAT(ParseFlags({"--json=yes"}, kSpecs),
              StatusIs(absl::StatusCode::kInvalidArgument, "--json takes no value"));
}

TEST(ExtractFlagTest, TakesTheFlagFromAnywhereBeforeDoubleDash) {
  std::vector<std::string> args = {"stats", "--address", "/s.sock", "--json"};
  absl::StatusOr<std::optional<std::string>> address = ExtractFlag(args, "address");
  ASSERT_OK(address);
  EXPECT_THAT(*address, Optional(std::string("/s.sock")));
  EXPECT_THAT(args, ElementsAre("stats", "--json"));

  args = {"--address=host:1", "replay", "--", "--address", "x"};
  address = ExtractFlag(args, "address");
  ASSERT_OK(address);
  EXPECT_THAT(*address, Optional(std::string("host:1")));
  EXPECT_THAT(args, ElementsAre("replay", "--", "--address", "x"));

  args = {"devices"};
  address = ExtractFlag(args, "address");
  ASSERT_OK(address);
  EXPECT_FALSE(address->has_value());

  args = {"devices", "--address"};
  EXPECT_THAT(ExtractFlag(args, "address"),
              StatusIs(absl::StatusCode::kInvalidArgument, "--address needs a value"));
}

TEST(IntFlagTest, RangeAndFallback) {
  absl::StatusOr<ParsedArgs> parsed = ParseFlags({"--device", "3"}, kSpecs);
  ASSERT_OK(parsed);
  EXPECT_THAT(IntFlag(*parsed, "device", 0, 0, 7), IsOkAndHolds(3));
  EXPECT_THAT(IntFlag(*parsed, "json", 5, 0, 7), IsOkAndHolds(5));
  EXPECT_THAT(
      IntFlag(*parsed, "device", 0, 0, 2),
      StatusIs(absl::StatusCode::kInvalidArgument, "--device wants an integer in [0, 2], got '3'"));
  parsed = ParseFlags({"--device", "one"}, kSpecs);
  ASSERT_OK(parsed);
  EXPECT_THAT(IntFlag(*parsed, "device", 0, 0, 7), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(UintFlagTest, RejectsNegativesAndGarbage) {
  const std::vector<FlagSpec> specs = {{"session", true}};
  absl::StatusOr<ParsedArgs> parsed = ParseFlags({"--session", "18446744073709551615"}, specs);
  ASSERT_OK(parsed);
  EXPECT_THAT(UintFlag(*parsed, "session", 0), IsOkAndHolds(UINT64_MAX));
  parsed = ParseFlags({"--session", "-1"}, specs);
  ASSERT_OK(parsed);
  EXPECT_THAT(UintFlag(*parsed, "session", 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "--session wants a non-negative integer, got '-1'"));
}

}  // namespace
}  // namespace gpumux
