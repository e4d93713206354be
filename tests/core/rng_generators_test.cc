#include "server/core/rng_generators.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::StatusIs;
using ::testing::HasSubstr;

const SessionId kSession(1);
const DeviceIndex kDevice0(0);
const DeviceIndex kDevice1(1);

TEST(RngGeneratorsTest, ManualSeedResetsOffsetAndStateRoundTrips) {
  RngGenerators rng(2);
  rng.AddSession(kSession);
  rng.ManualSeed(kSession, kDevice0, 1234);
  EXPECT_EQ(rng.InitialSeed(kSession, kDevice0), 1234u);
  RngState used = *rng.Advance(kSession, kDevice0, 8);
  EXPECT_EQ(used.seed, 1234u);
  EXPECT_EQ(used.offset, 0u);
  std::string state = rng.GetState(kSession, kDevice0);
  ASSERT_EQ(state.size(), 16u);
  EXPECT_EQ(static_cast<unsigned char>(state[0]), 1234 & 0xff);  // seed, little-endian
  EXPECT_EQ(static_cast<unsigned char>(state[8]), 8);             // offset, little-endian
  EXPECT_EQ(rng.Advance(kSession, kDevice0, 4)->offset, 8u);
  ASSERT_OK(rng.SetState(kSession, kDevice0, state));
  EXPECT_EQ(rng.Advance(kSession, kDevice0, 4)->offset, 8u);  // back where the state was taken
  rng.ManualSeed(kSession, kDevice0, 1234);
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
  for (int i = 0; i < 100; ++i) EXPECT_LT(rng.Seed(kSession, kDevice0), uint64_t{1} << 53);
  uint64_t seed = rng.SeedAll(kSession);
  EXPECT_EQ(rng.InitialSeed(kSession, kDevice0), seed);
  EXPECT_EQ(rng.InitialSeed(kSession, kDevice1), seed);
  rng.ManualSeedAll(kSession, 7);
  EXPECT_EQ(rng.InitialSeed(kSession, kDevice1), 7u);
}

TEST(RngGeneratorsTest, SessionsAndDevicesAreIndependent) {
  RngGenerators rng(2);
  rng.AddSession(kSession);
  rng.AddSession(SessionId(2));
  rng.ManualSeed(kSession, kDevice0, 1);
  rng.ManualSeed(SessionId(2), kDevice0, 2);
  ASSERT_OK(rng.Advance(kSession, kDevice0, 40));
  EXPECT_EQ(rng.Advance(SessionId(2), kDevice0, 4)->offset, 0u);
  EXPECT_EQ(rng.InitialSeed(SessionId(2), kDevice0), 2u);
  rng.ManualSeed(kSession, kDevice1, 9);
  EXPECT_EQ(rng.InitialSeed(kSession, kDevice0), 1u);
}

TEST(RngGeneratorsTest, EndedSessionsKeepNothing) {
  RngGenerators rng(1);
  rng.AddSession(kSession);
  rng.ManualSeed(kSession, kDevice0, 5);
  rng.RemoveSession(kSession);
  // A call racing with the session's end acts on a throwaway generator.
  rng.ManualSeed(kSession, kDevice0, 77);
  EXPECT_EQ(rng.Advance(kSession, kDevice0, 4)->offset, 0u);
  EXPECT_NE(rng.InitialSeed(kSession, kDevice0), 77u);
  EXPECT_EQ(rng.GetState(kSession, kDevice0).size(), 16u);
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
  EXPECT_THAT(rng.Advance(kSession, kDevice0, 8),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("without wrapping past 2^64")));
  absl::StatusOr<RngState> last = rng.Advance(kSession, kDevice0, 4);
  ASSERT_OK(last);
  EXPECT_EQ(last->offset, ~uint64_t{7});  // unchanged by the refusal
}

}  // namespace
}  // namespace gpumux
