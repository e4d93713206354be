#include "server/core/session_registry.h"

#include <string>

#include "absl/strings/str_cat.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::StatusIs;
using ::testing::HasSubstr;

absl::StatusOr<OpenedSession> OpenWith(SessionRegistry& registry, const std::string& name,
                                       const std::string& tenant = "",
                                       const std::string& label_key = "",
                                       const std::string& label_value = "") {
  SessionRecord info;
  info.client_name = name;
  info.tenant = tenant;
  if (!label_key.empty()) info.labels[label_key] = label_value;
  return registry.Open(std::move(info), nullptr);
}

// Names and labels are printed in `gpumux sessions` and in the daemon's log:
// an ANSI escape or a newline there would let a client rewrite an operator's
// screen or forge log lines.
TEST(SessionRegistryTest, RefusesControlCharactersInNamesTenantsAndLabels) {
  SessionRegistry registry;
  EXPECT_THAT(OpenWith(registry, "evil\x1b[2J"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("client name holds control character U+001B at byte 4")));
  EXPECT_THAT(OpenWith(registry, "ok", "tenant\nINFO forged"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tenant holds control character U+000A")));
  EXPECT_THAT(OpenWith(registry, "ok", "", "pod\x7f", "x"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a label key holds control character U+007F")));
  EXPECT_THAT(OpenWith(registry, "ok", "", "pod",
                       "a\xc2\x9b"
                       "31m"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("label 'pod' holds control character U+009B")));
  // Bidirectional overrides and isolates (Trojan Source) would show a name
  // other than the one it is in `gpumux sessions`, `tenants` and `top`.
  EXPECT_THAT(OpenWith(registry,
                       "trainer\xe2\x80\xae"
                       "0-dop"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("client name holds control character U+202E at byte 7")));
  EXPECT_THAT(OpenWith(registry, "ok", "team\xe2\x81\xa6-a"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tenant holds control character U+2066 at byte 4")));
  EXPECT_THAT(OpenWith(registry, "ok", "", "pod", "x\xe2\x80\x8f"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("label 'pod' holds control character U+200F")));
  EXPECT_THAT(OpenWith(registry, "\xd8\x9c"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("U+061C at byte 0")));
  // Printable UTF-8 is fine, including U+00A0 and up, and the punctuation
  // beside the bidirectional characters (U+2014, U+2030).
  EXPECT_OK(OpenWith(registry, "tr\xc3\xa4iner \xe2\x9c\x93 \xe2\x80\x94 \xe2\x80\xb0",
                     "team-\xc2\xa0"
                     "a",
                     "pod", "web-0"));
}

TEST(SessionRegistryTest, RefusesEverythingOnceShuttingDown) {
  SessionRegistry registry;
  absl::StatusOr<OpenedSession> open = OpenWith(registry, "before");
  ASSERT_OK(open);
  const std::string credentials = absl::StrCat(open->info.id.value(), ":", open->secret);
  EXPECT_OK(registry.Authenticate(credentials));
  registry.BeginShutdown();
  EXPECT_THAT(registry.Authenticate(credentials),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("gpumuxd is shutting down")));
  EXPECT_THAT(OpenWith(registry, "after"), StatusIs(absl::StatusCode::kUnavailable));
}

TEST(SessionRegistryTest, RefusesSessionsPastMaxSessionsAndTakesMoreOnceOneEnds) {
  SessionRegistry registry;
  registry.set_max_sessions(2);
  absl::StatusOr<OpenedSession> first = OpenWith(registry, "a", "tenant-a");
  ASSERT_OK(first);
  ASSERT_OK(OpenWith(registry, "b", "tenant-b"));
  EXPECT_THAT(OpenWith(registry, "c", "tenant-c"), StatusIs(absl::StatusCode::kResourceExhausted,
                                                            HasSubstr("gpumuxd --max-sessions=2")));
  registry.Close(first->info.id);
  EXPECT_OK(OpenWith(registry, "c", "tenant-c"));
}

// One tenant holds at most a quarter of the sessions, the sessions opened
// without a tenant counting as one, so that filling its share leaves the
// rest to the others.
TEST(SessionRegistryTest, ATenantHoldsAQuarterOfTheSessions) {
  SessionRegistry registry;
  registry.set_max_sessions(8);
  absl::StatusOr<OpenedSession> first = OpenWith(registry, "a1", "pod-a");
  ASSERT_OK(first);
  ASSERT_OK(OpenWith(registry, "a2", "pod-a"));
  EXPECT_THAT(OpenWith(registry, "a3", "pod-a"),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("tenant 'pod-a' holds 2 sessions, a tenant's share (a quarter of "
                                 "the daemon's 8)")));
  ASSERT_OK(OpenWith(registry, "b1", "pod-b"));
  ASSERT_OK(OpenWith(registry, "none1"));
  ASSERT_OK(OpenWith(registry, "none2"));
  EXPECT_THAT(OpenWith(registry, "none3"),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("the sessions without a tenant hold 2 sessions")));
  registry.Close(first->info.id);
  EXPECT_OK(OpenWith(registry, "a3", "pod-a"));
}

}  // namespace
}  // namespace gpumux
