#include "server/core/rng_generators.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::IsOkAndHolds;
using ::gpumux::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Lt;
using ::testing::Ne;

const SessionId kSession(1);
const DeviceIndex kDevice0(0);
const DeviceIndex kDevice1(1);

TEST(RngGeneratorsTest, ManualSeedResetsOffsetAndStateRoundTrips) {
  RngGenerators rng(2);
  rng.AddSession(kSession);
  ASSERT_OK(rng.ManualSeed(kSession, kDevice0, 1234));
  EXPECT_THAT(rng.InitialSeed(kSession, kDevice0), IsOkAndHolds(1234u));
  RngState used = *rng.Advance(kSession, kDevice0, 8);
  EXPECT_EQ(used.seed, 1234u);
  EXPECT_EQ(used.offset, 0u);
  std::string state = *rng.GetState(kSession, kDevice0);
  ASSERT_EQ(state.size(), 16u);
  EXPECT_EQ(static_cast<unsigned char>(state[0]), 1234 & 0xff);  // seed, little-endian
  EXPECT_EQ(static_cast<unsigned char>(state[8]), 8);            // offset, little-endian
  EXPECT_EQ(rng.Advance(kSession, kDevice0, 4)->offset, 8u);
  ASSERT_OK(rng.SetState(kSession, kDevice0, state));
  EXPECT_EQ(rng.Advance(kSession, kDevice0, 4)->offset, 8u);  // back where the state was taken
  ASSERT_OK(rng.ManualSeed(kSession, kDevice0, 1234));
  EXPECT_EQ(rng.Advance(kSession, kDevice0, 4)->offset, 0u);
}

TEST(RngGeneratorsTest, EightByteStateSetsSeedAndZeroOffset) {
  RngGenerators rng(1);
  rng.AddSession(kSession);
  ASSERT_OK(rng.Advance(kSession, kDevice0, 12));
  ASSERT_OK(rng.SetState(kSession, kDevice0, std::string("\x05\0\0\0\0\0\0\0", 8)));
  RngState state = *rng.Advance(kSession, kDevice0, 4);
  EXPECT_EQ(state.seed, 5u);
  EXPECT_EQ(state.offset, 0u);
}

TEST(RngGeneratorsTest, RejectsBadStatesWithPyTorchsMessages) {
  RngGenerators rng(1);
  rng.AddSession(kSession);
  EXPECT_THAT(rng.SetState(kSession, kDevice0, "short"),
              StatusIs(absl::StatusCode::kInvalidArgument, "RNG state is wrong size"));
  std::string odd(16, '\0');
  odd[8] = 2;
  EXPECT_THAT(rng.SetState(kSession, kDevice0, odd),
              StatusIs(absl::StatusCode::kInvalidArgument, "offset must be a multiple of 4"));
}

TEST(RngGeneratorsTest, SeedIs53BitsAndSeedAllSharesIt) {
  RngGenerators rng(2);
  rng.AddSession(kSession);
  for (int i = 0; i < 100; ++i)
    EXPECT_THAT(rng.Seed(kSession, kDevice0), IsOkAndHolds(Lt(uint64_t{1} << 53)));
  uint64_t seed = rng.SeedAll(kSession);
  EXPECT_THAT(rng.InitialSeed(kSession, kDevice0), IsOkAndHolds(seed));
  EXPECT_THAT(rng.InitialSeed(kSession, kDevice1), IsOkAndHolds(seed));
  rng.ManualSeedAll(kSession, 7);
  EXPECT_THAT(rng.InitialSeed(kSession, kDevice1), IsOkAndHolds(7u));
}

TEST(RngGeneratorsTest, SessionsAndDevicesAreIndependent) {
  RngGenerators rng(2);
  rng.AddSession(kSession);
  rng.AddSession(SessionId(2));
  ASSERT_OK(rng.ManualSeed(kSession, kDevice0, 1));
  ASSERT_OK(rng.ManualSeed(SessionId(2), kDevice0, 2));
  ASSERT_OK(rng.Advance(kSession, kDevice0, 40));
  EXPECT_EQ(rng.Advance(SessionId(2), kDevice0, 4)->offset, 0u);
  EXPECT_THAT(rng.InitialSeed(SessionId(2), kDevice0), IsOkAndHolds(2u));
  ASSERT_OK(rng.ManualSeed(kSession, kDevice1, 9));
  EXPECT_THAT(rng.InitialSeed(kSession, kDevice0), IsOkAndHolds(1u));
}

TEST(RngGeneratorsTest, EndedSessionsKeepNothing) {
  RngGenerators rng(1);
  rng.AddSession(kSession);
  ASSERT_OK(rng.ManualSeed(kSession, kDevice0, 5));
  rng.RemoveSession(kSession);
  // A call racing with the session's end acts on a throwaway generator.
  ASSERT_OK(rng.ManualSeed(kSession, kDevice0, 77));
  EXPECT_EQ(rng.Advance(kSession, kDevice0, 4)->offset, 0u);
  EXPECT_THAT(rng.InitialSeed(kSession, kDevice0), IsOkAndHolds(Ne(77u)));
  EXPECT_EQ(rng.GetState(kSession, kDevice0)->size(), 16u);
}

// An offset that would wrap past 2^64 is refused and left as it was: the
// numbers would repeat from the start of the Philox stream.
TEST(RngGeneratorsTest, AnOffsetThatWouldWrapIsRefused) {
  RngGenerators rng(1);
  rng.AddSession(kSession);
  std::string state(16, '\0');
  for (int i = 8; i < 16; ++i) state[static_cast<size_t>(i)] = '\xff';
  state[8] = static_cast<char>(0xf8);  // offset 2^64 - 8
  ASSERT_OK(rng.SetState(kSession, kDevice0, state));
  EXPECT_THAT(
      rng.Advance(kSession, kDevice0, 8),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("without wrapping past 2^64")));
  absl::StatusOr<RngState> last = rng.Advance(kSession, kDevice0, 4);
  ASSERT_OK(last);
  EXPECT_EQ(last->offset, ~uint64_t{7});  // unchanged by the refusal
}

// Devices are request data: every call naming one checks it, with the
// message the RPC layer gave before, and changes nothing when it is bad.
TEST(RngGeneratorsTest, DevicesOutOfRangeAreInvalidArguments) {
  RngGenerators rng(2);
  rng.AddSession(kSession);
  ASSERT_OK(rng.ManualSeed(kSession, kDevice1, 3));
  const std::string message = "device 2 is out of range: this daemon has 2 devices (0..1)";
  for (DeviceIndex bad : {DeviceIndex(2), DeviceIndex(-1), DeviceIndex(1 << 30)}) {
    SCOPED_TRACE(bad.value());
    EXPECT_THAT(rng.ManualSeed(kSession, bad, 1), StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(rng.Seed(kSession, bad), StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(rng.InitialSeed(kSession, bad), StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(rng.GetState(kSession, bad), StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(rng.SetState(kSession, bad, std::string(16, '\0')),
                StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(rng.Advance(kSession, bad, 4), StatusIs(absl::StatusCode::kInvalidArgument));
  }
  EXPECT_THAT(rng.InitialSeed(kSession, DeviceIndex(2)),
              StatusIs(absl::StatusCode::kInvalidArgument, message));
  // Also for a session that is not (or no longer) added.
  EXPECT_THAT(rng.GetState(SessionId(99), DeviceIndex(2)),
              StatusIs(absl::StatusCode::kInvalidArgument, message));
  EXPECT_THAT(rng.InitialSeed(kSession, kDevice1), IsOkAndHolds(3u));
  EXPECT_THAT(rng.Advance(kSession, kDevice1, 4),
              IsOkAndHolds(::testing::Field(&RngState::offset, 0u)));
}

TEST(RngGeneratorsTest, AllDeviceCallsCoverEveryDevice) {
  RngGenerators rng(3);
  rng.AddSession(kSession);
  rng.ManualSeedAll(kSession, 11);
  ASSERT_OK(rng.Advance(kSession, kDevice1, 8));
  std::vector<std::string> states = rng.GetStateAll(kSession);
  ASSERT_EQ(states.size(), 3u);
  for (int d = 0; d < 3; ++d) {
    SCOPED_TRACE(d);
    EXPECT_THAT(rng.GetState(kSession, DeviceIndex(d)),
                IsOkAndHolds(states[static_cast<size_t>(d)]));
    EXPECT_EQ(static_cast<unsigned char>(states[static_cast<size_t>(d)][0]), 11);
  }
  EXPECT_EQ(static_cast<unsigned char>(states[1][8]), 8);
  EXPECT_EQ(static_cast<unsigned char>(states[2][8]), 0);
  EXPECT_THAT(
      rng.SetStateAll(kSession, absl::MakeConstSpan(states).subspan(0, 2)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("one state per device (3), not 2")));
  std::reverse(states.begin(), states.end());
  ASSERT_OK(rng.SetStateAll(kSession, states));
  EXPECT_THAT(rng.Advance(kSession, DeviceIndex(2), 4),
              IsOkAndHolds(::testing::Field(&RngState::offset, 0u)));
  EXPECT_THAT(rng.Advance(kSession, DeviceIndex(1), 4),
              IsOkAndHolds(::testing::Field(&RngState::offset, 8u)));
  EXPECT_THAT(rng.Advance(kSession, kDevice0, 4),
              IsOkAndHolds(::testing::Field(&RngState::offset, 0u)));
}

}  // namespace
}  // namespace gpumux
