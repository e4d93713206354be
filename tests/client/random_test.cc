// torch.cuda.random through the client against the real daemon (host
// backend): seeding, state round trips, offsets, and fills whose bits are
// checked against common/tensor/rng_fill.h's reference.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/tensor/rng_fill.h"
#include "gmock/gmock.h"
#include "gpumux/client.h"
#include "gpumux/copy_options.h"
#include "gpumux/guards.h"
#include "gpumux/memory.h"
#include "gpumux/random.h"
#include "gpumux/random_options.h"
#include "gtest/gtest.h"
#include "tests/client/client_test_support.h"
#include "tests/status_matchers.h"
#include "tests/support/daemon_client_test.h"

namespace gpumux::testing {
namespace {

using ::testing::HasSubstr;

std::string State(uint64_t seed, uint64_t offset) {
  std::string state(16, '\0');
  for (int i = 0; i < 8; ++i) {
    state[i] = static_cast<char>(seed >> (8 * i));
    state[8 + i] = static_cast<char>(offset >> (8 * i));
  }
  return state;
}

uint64_t OffsetOf(const std::string& state) {
  uint64_t offset = 0;
  for (int i = 0; i < 8; ++i)
    offset |= uint64_t{static_cast<unsigned char>(state[8 + i])} << (8 * i);
  return offset;
}

CopyOptions Wait() {
  CopyOptions options;
  options.wait = true;
  return options;
}

// What the daemon must write for `request` from (seed, offset).
std::string Expected(const RngRequest& request, uint64_t seed, uint64_t offset) {
  std::string bytes(request.elements * RngElementSize(request.dtype), '\0');
  FillRandom(bytes.data(), request, seed, offset);
  return bytes;
}

std::string Bytes(const DeviceBuffer& buffer, uint64_t offset, uint64_t size) {
  return std::string(static_cast<const char*>(buffer.data()) + offset, size);
}

class RandomTest : public DaemonClientTest {};

TEST_F(RandomTest, TheSameSeedGivesTheSameBitsAsTheReference) {
  absl::StatusOr<DeviceBuffer> first = memory::Allocate(client(), 4096 + 3, DeviceIndex(1));
  absl::StatusOr<DeviceBuffer> second = memory::Allocate(client(), 4096 + 3, DeviceIndex(1));
  ASSERT_OK(first);
  ASSERT_OK(second);
  ASSERT_OK(random::ManualSeed(client(), 1234, DeviceIndex(1)));
  absl::StatusOr<GenerateResult> drawn =
      random::Generate(client(), *first, 3, Dtype::kInt32, 1024, Bits(), Wait());
  ASSERT_OK(drawn);
  EXPECT_EQ(drawn->seed, 1234u);
  EXPECT_EQ(drawn->offset, 0u);
  RngRequest bits;
  bits.dtype = RngDtype::kI32;
  bits.kind = RngKind::kBits;
  bits.elements = 1024;
  const std::string expected = Expected(bits, 1234, 0);
  EXPECT_TRUE(Bytes(*first, 3, 4096) == expected);
  EXPECT_NE(expected, std::string(4096, '\0'));

  ASSERT_OK(random::ManualSeed(client(), 1234, DeviceIndex(1)));
  ASSERT_OK(random::Generate(client(), *second, 3, Dtype::kInt32, 1024, Bits(), Wait()).status());
  EXPECT_TRUE(Bytes(*second, 3, 4096) == expected);
  ASSERT_OK(random::ManualSeed(client(), 4321, DeviceIndex(1)));
  ASSERT_OK(random::Generate(client(), *second, 3, Dtype::kInt32, 1024, Bits(), Wait()).status());
  EXPECT_FALSE(Bytes(*second, 3, 4096) == expected);
}

TEST_F(RandomTest, UniformAndNormalFillsMatchTheReference) {
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 8 * 1000);
  ASSERT_OK(buffer);
  ASSERT_OK(random::ManualSeed(client(), 7));
  absl::StatusOr<GenerateResult> uniform =
      random::Generate(client(), *buffer, 0, Dtype::kFloat32, 1000, Uniform{-2.0, 3.0}, Wait());
  ASSERT_OK(uniform);
  RngRequest request;
  request.dtype = RngDtype::kF32;
  request.kind = RngKind::kUniform;
  request.elements = 1000;
  request.a = -2.0;
  request.b = 3.0;
  EXPECT_TRUE(Bytes(*buffer, 0, 4000) == Expected(request, 7, uniform->offset));
  std::vector<float> values(1000);
  std::memcpy(values.data(), buffer->data(), 4000);
  for (float value : values) {
    ASSERT_GE(value, -2.0f);
    ASSERT_LT(value, 3.0f);
  }

  absl::StatusOr<GenerateResult> normal =
      random::Generate(client(), *buffer, 0, Dtype::kFloat64, 1000, Normal{10.0, 0.5}, Wait());
  ASSERT_OK(normal);
  EXPECT_GT(normal->offset, uniform->offset);
  std::vector<double> samples(1000);
  std::memcpy(samples.data(), buffer->data(), 8000);
  double sum = 0;
  for (double sample : samples) sum += sample;
  EXPECT_NEAR(sum / 1000, 10.0, 0.1);
  request.dtype = RngDtype::kF64;
  request.kind = RngKind::kNormal;
  request.a = 10.0;
  request.b = 0.5;
  std::vector<double> reference(1000);
  FillRandom(reference.data(), request, 7, normal->offset);
  for (int i = 0; i < 1000; ++i) ASSERT_NEAR(samples[i], reference[i], 1e-9) << i;
}

TEST_F(RandomTest, OffsetsAdvanceInMultiplesOfFour) {
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 1 << 16);
  ASSERT_OK(buffer);
  ASSERT_OK(random::ManualSeed(client(), 99));
  EXPECT_THAT(random::GetRngState(client()), IsOkAndHolds(State(99, 0)));
  uint64_t previous = 0;
  for (uint64_t elements :
       {uint64_t{1}, uint64_t{3}, uint64_t{5}, uint64_t{1000}, uint64_t{4097}}) {
    for (Dtype dtype : {Dtype::kUInt8, Dtype::kFloat16, Dtype::kInt64}) {
      absl::StatusOr<GenerateResult> drawn =
          random::Generate(client(), *buffer, 0, dtype, elements, Bits(), Wait());
      ASSERT_OK(drawn);
      EXPECT_EQ(drawn->offset, previous);  // drawn from the state before the call
      absl::StatusOr<std::string> state = random::GetRngState(client());
      ASSERT_OK(state);
      const uint64_t offset = OffsetOf(*state);
      EXPECT_GT(offset, previous);
      EXPECT_EQ(offset % 4, 0u) << offset;
      previous = offset;
    }
  }
}

TEST_F(RandomTest, StateRoundTripsAndReplaysTheSameValues) {
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 4000, DeviceIndex(1));
  ASSERT_OK(buffer);
  ASSERT_OK(
      random::Generate(client(), *buffer, 0, Dtype::kFloat32, 10, Uniform{}, Wait()).status());
  absl::StatusOr<std::string> saved = random::GetRngState(client(), DeviceIndex(1));
  ASSERT_OK(saved);
  EXPECT_THAT(*saved, ::testing::SizeIs(16));
  ASSERT_OK(
      random::Generate(client(), *buffer, 0, Dtype::kBFloat16, 2000, Normal{}, Wait()).status());
  const std::string first = Bytes(*buffer, 0, 4000);
  ASSERT_OK(random::SetRngState(client(), *saved, DeviceIndex(1)));
  EXPECT_THAT(random::GetRngState(client(), DeviceIndex(1)), IsOkAndHolds(*saved));
  ASSERT_OK(
      random::Generate(client(), *buffer, 0, Dtype::kBFloat16, 2000, Normal{}, Wait()).status());
  EXPECT_TRUE(Bytes(*buffer, 0, 4000) == first);

  // 8 bytes: the seed alone, offset 0.
  ASSERT_OK(random::SetRngState(client(), saved->substr(0, 8), DeviceIndex(1)));
  EXPECT_THAT(random::GetRngState(client(), DeviceIndex(1)),
              IsOkAndHolds(saved->substr(0, 8) + std::string(8, '\0')));
  EXPECT_THAT(random::SetRngState(client(), "12345", DeviceIndex(1)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("RNG state is wrong size")));
  EXPECT_THAT(
      random::SetRngState(client(), State(5, 6), DeviceIndex(1)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("offset must be a multiple of 4")));
}

TEST_F(RandomTest, SeedsPerDeviceAndForAll) {
  ASSERT_OK(random::ManualSeed(client(), 11, DeviceIndex(0)));
  {
    DeviceGuard guard(client(), DeviceIndex(1));
    ASSERT_OK(random::ManualSeed(client(), 22));  // the current device
    EXPECT_THAT(random::InitialSeed(client()), IsOkAndHolds(22u));
  }
  EXPECT_THAT(random::InitialSeed(client()), IsOkAndHolds(11u));
  EXPECT_THAT(random::InitialSeed(client(), DeviceIndex(1)), IsOkAndHolds(22u));

  absl::StatusOr<uint64_t> fresh = random::Seed(client(), DeviceIndex(1));
  ASSERT_OK(fresh);
  EXPECT_THAT(*fresh, ::testing::Lt(uint64_t{1} << 53));
  EXPECT_THAT(random::InitialSeed(client(), DeviceIndex(1)), IsOkAndHolds(*fresh));
  EXPECT_THAT(random::InitialSeed(client(), DeviceIndex(0)), IsOkAndHolds(11u));

  absl::StatusOr<uint64_t> everywhere = random::SeedAll(client());
  ASSERT_OK(everywhere);
  EXPECT_THAT(random::InitialSeed(client(), DeviceIndex(0)), IsOkAndHolds(*everywhere));
  EXPECT_THAT(random::InitialSeed(client(), DeviceIndex(1)), IsOkAndHolds(*everywhere));

  ASSERT_OK(random::ManualSeedAll(client(), 5));
  absl::StatusOr<std::vector<std::string>> states = random::GetRngStateAll(client());
  ASSERT_OK(states);
  EXPECT_THAT(*states, ::testing::ElementsAre(State(5, 0), State(5, 0)));

  // Sessions have generators of their own.
  auto other = ConnectAnother();
  ASSERT_NE(other, nullptr);
  ASSERT_OK(random::ManualSeed(*other, 6));
  EXPECT_THAT(random::InitialSeed(client(), DeviceIndex(0)), IsOkAndHolds(5u));
}

TEST_F(RandomTest, SetStateAllNeedsOneStatePerDevice) {
  const std::vector<std::string> states = {State(1, 8), State(2, 16)};
  ASSERT_OK(random::SetRngStateAll(client(), states));
  EXPECT_THAT(random::GetRngStateAll(client()), IsOkAndHolds(states));
  EXPECT_THAT(random::GetRngState(client(), DeviceIndex(1)), IsOkAndHolds(State(2, 16)));
  const std::vector<std::string> one = {State(3, 0)};
  EXPECT_THAT(random::SetRngStateAll(client(), one), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(random::GetRngStateAll(client()), IsOkAndHolds(states));  // unchanged
}

TEST_F(RandomTest, GenerateErrors) {
  auto other = ConnectAnother();
  ASSERT_NE(other, nullptr);
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 1000);
  absl::StatusOr<DeviceBuffer> theirs = memory::Allocate(*other, 1000);
  ASSERT_OK(buffer);
  ASSERT_OK(theirs);
  ASSERT_OK(random::ManualSeed(client(), 1));
  EXPECT_THAT(random::Generate(client(), *buffer, 0, Dtype::kFloat32, 251, Uniform{}),
              StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(random::Generate(client(), *buffer, 4, Dtype::kFloat32, 250, Uniform{}),
              StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(random::Generate(client(), *buffer, 0, Dtype::kFloat32, 10, Uniform{1.0, 1.0}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(random::Generate(client(), *buffer, 0, Dtype::kInt32, 10, Normal{}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(random::Generate(client(), *buffer, 0, Dtype::kFloat32, 0, Uniform{}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(random::Generate(client(), *theirs, 0, Dtype::kFloat32, 10, Uniform{}),
              StatusIs(absl::StatusCode::kNotFound));
  // Refused requests leave the generator where it was.
  EXPECT_THAT(random::GetRngState(client()), IsOkAndHolds(State(1, 0)));
  EXPECT_THAT(random::ManualSeed(client(), 1, DeviceIndex(2)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(random::GetRngState(client(), DeviceIndex(-1)),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(RandomTest, GenerateReturnsACompletionEventWhenAsked) {
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 1 << 20, DeviceIndex(1));
  ASSERT_OK(buffer);
  CopyOptions options;
  options.completion_event = true;
  absl::StatusOr<GenerateResult> drawn =
      random::Generate(client(), *buffer, 0, Dtype::kFloat32, 1 << 18, Uniform{}, options);
  ASSERT_OK(drawn);
  ASSERT_TRUE(drawn->completion.created());
  EXPECT_EQ(drawn->completion.device(), DeviceIndex(1));
  ASSERT_OK(drawn->completion.Synchronize());
  RngRequest request;
  request.elements = 1 << 18;
  EXPECT_TRUE(Bytes(*buffer, 0, 1 << 20) == Expected(request, drawn->seed, drawn->offset));
}

}  // namespace
}  // namespace gpumux::testing
