// Random service end to end over a real Unix socket: torch.cuda.random's
// seeding and 16-byte states, offsets advancing as PyTorch's do, and fills
// whose bytes match common/tensor/rng_fill.h's FillRandom for the same seed and
// offset bit for bit.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/tensor/rng_fill.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/rpc/daemon_fixture.h"
#include "tests/rpc/grpc_status_matchers.h"

namespace gpumux::testing {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMiB = uint64_t{1} << 20;

v1::GenerateRequest Uniform(uint64_t allocation, v1::Dtype dtype, uint64_t elements, double low,
                            double high) {
  v1::GenerateRequest request;
  request.mutable_dst()->set_allocation_id(allocation);
  request.set_dtype(dtype);
  request.set_elements(elements);
  request.mutable_uniform()->set_low(low);
  request.mutable_uniform()->set_high(high);
  return request;
}

v1::GenerateRequest Normal(uint64_t allocation, v1::Dtype dtype, uint64_t elements, double mean,
                           double std) {
  v1::GenerateRequest request;
  request.mutable_dst()->set_allocation_id(allocation);
  request.set_dtype(dtype);
  request.set_elements(elements);
  request.mutable_normal()->set_mean(mean);
  request.mutable_normal()->set_std(std);
  return request;
}

v1::GenerateRequest Bits(uint64_t allocation, v1::Dtype dtype, uint64_t elements) {
  v1::GenerateRequest request;
  request.mutable_dst()->set_allocation_id(allocation);
  request.set_dtype(dtype);
  request.set_elements(elements);
  request.mutable_bits();
  return request;
}

// The request as common/tensor/rng_fill.h takes it (valid dtypes and distributions only).
RngRequest ToRng(const v1::GenerateRequest& request) {
  RngRequest rng;
  switch (request.dtype()) {
    case v1::DTYPE_FLOAT64:
      rng.dtype = RngDtype::kF64;
      break;
    case v1::DTYPE_FLOAT16:
      rng.dtype = RngDtype::kF16;
      break;
    case v1::DTYPE_BFLOAT16:
      rng.dtype = RngDtype::kBF16;
      break;
    case v1::DTYPE_INT32:
      rng.dtype = RngDtype::kI32;
      break;
    case v1::DTYPE_INT64:
      rng.dtype = RngDtype::kI64;
      break;
    case v1::DTYPE_UINT8:
      rng.dtype = RngDtype::kU8;
      break;
    default:
      rng.dtype = RngDtype::kF32;
      break;
  }
  rng.elements = request.elements();
  if (request.has_uniform()) {
    rng.kind = RngKind::kUniform;
    rng.a = request.uniform().low();
    rng.b = request.uniform().high();
  } else if (request.has_normal()) {
    rng.kind = RngKind::kNormal;
    rng.a = request.normal().mean();
    rng.b = request.normal().std();
  } else {
    rng.kind = RngKind::kBits;
  }
  return rng;
}

// What FillRandom writes for `request` from (seed, offset).
std::string Expected(const v1::GenerateRequest& request, uint64_t seed, uint64_t offset) {
  const RngRequest rng = ToRng(request);
  std::string bytes(rng.elements * RngElementSize(rng.dtype), '\0');
  FillRandom(bytes.data(), rng, seed, offset);
  return bytes;
}

std::string State(uint64_t seed, uint64_t offset) {
  std::string bytes(16, '\0');
  for (int i = 0; i < 8; ++i) {
    bytes[static_cast<size_t>(i)] = static_cast<char>(seed >> (8 * i));
    bytes[static_cast<size_t>(8 + i)] = static_cast<char>(offset >> (8 * i));
  }
  return bytes;
}

class RandomServiceTest : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    session_ = std::make_unique<RawSession>(channel_, "random");
    for (int device : {0, 1}) {
      v1::Allocation a;
      ASSERT_THAT(session_->Allocate(device, 8 * kMiB, &a), GrpcIsOk());
      allocations_.push_back(a.allocation_id());
    }
  }
  void TearDown() override { session_.reset(); }

  RawSession& session() { return *session_; }
  uint64_t allocation(int device) const { return allocations_[static_cast<size_t>(device)]; }

  grpc::Status ManualSeed(int device, uint64_t seed, bool all_devices = false) {
    v1::ManualSeedRequest request;
    request.set_device(device);
    request.set_seed(seed);
    request.set_all_devices(all_devices);
    v1::ManualSeedResponse response;
    return session_->random().ManualSeed(session_->Context().get(), request, &response);
  }

  grpc::Status Seed(int device, bool all_devices, uint64_t* seed) {
    v1::SeedRequest request;
    request.set_device(device);
    request.set_all_devices(all_devices);
    v1::SeedResponse response;
    grpc::Status status = session_->random().Seed(session_->Context().get(), request, &response);
    *seed = response.seed();
    return status;
  }

  uint64_t InitialSeed(int device) {
    v1::InitialSeedRequest request;
    request.set_device(device);
    v1::SeedResponse response;
    EXPECT_THAT(session_->random().InitialSeed(session_->Context().get(), request, &response),
                GrpcIsOk());
    return response.seed();
  }

  grpc::Status GetState(int device, bool all_devices, std::vector<std::string>* states) {
    v1::GetRngStateRequest request;
    request.set_device(device);
    request.set_all_devices(all_devices);
    v1::GetRngStateResponse response;
    grpc::Status status =
        session_->random().GetState(session_->Context().get(), request, &response);
    states->assign(response.states().begin(), response.states().end());
    return status;
  }

  std::string StateOf(int device) {
    std::vector<std::string> states;
    EXPECT_THAT(GetState(device, false, &states), GrpcIsOk());
    return states.size() == 1 ? states[0] : std::string();
  }

  grpc::Status SetState(int device, bool all_devices, const std::vector<std::string>& states) {
    v1::SetRngStateRequest request;
    request.set_device(device);
    request.set_all_devices(all_devices);
    for (const std::string& state : states) request.add_states(state);
    v1::SetRngStateResponse response;
    return session_->random().SetState(session_->Context().get(), request, &response);
  }

  grpc::Status Generate(const v1::GenerateRequest& request, v1::GenerateResponse* out = nullptr) {
    v1::GenerateResponse response;
    grpc::Status status =
        session_->random().Generate(session_->Context().get(), request, &response);
    if (out != nullptr) *out = response;
    return status;
  }

  // Generates, then reads the filled bytes back (in 1 MiB pieces, under
  // gRPC's default receive limit).
  std::string GenerateAndRead(const v1::GenerateRequest& request,
                              v1::GenerateResponse* out = nullptr) {
    EXPECT_THAT(Generate(request, out), GrpcIsOk());
    const uint64_t size = request.elements() * RngElementSize(ToRng(request).dtype);
    std::string bytes;
    for (uint64_t done = 0; done < size;) {
      v1::DeviceToHostRequest read;
      read.mutable_src()->set_allocation_id(request.dst().allocation_id());
      read.mutable_src()->set_offset(request.dst().offset() + done);
      read.set_inline_size(std::min(size - done, kMiB));
      v1::DeviceToHostResponse response;
      EXPECT_THAT(session_->copy().DeviceToHost(session_->Context().get(), read, &response),
                  GrpcIsOk());
      if (response.data().size() != read.inline_size()) break;
      bytes += response.data();
      done += read.inline_size();
    }
    return bytes;
  }

  std::unique_ptr<RawSession> session_;
  std::vector<uint64_t> allocations_;
};

TEST_F(RandomServiceTest, ManualSeedMakesFillsRepeatableAndEqualToFillRandom) {
  ASSERT_THAT(ManualSeed(0, 1234), GrpcIsOk());
  const v1::GenerateRequest request = Uniform(allocation(0), v1::DTYPE_FLOAT32, 1000, 0, 1);
  v1::GenerateResponse first_from, second_from;
  const std::string first = GenerateAndRead(request, &first_from);
  const std::string second = GenerateAndRead(request, &second_from);
  EXPECT_EQ(first_from.seed(), 1234u);
  EXPECT_EQ(first_from.offset(), 0u);
  EXPECT_EQ(second_from.offset(), 1000u);
  EXPECT_EQ(first, Expected(request, 1234, 0));
  EXPECT_EQ(second, Expected(request, 1234, 1000));
  EXPECT_NE(first, second);

  ASSERT_THAT(ManualSeed(0, 1234), GrpcIsOk());
  EXPECT_EQ(GenerateAndRead(request), first);
  EXPECT_EQ(GenerateAndRead(request), second);
  EXPECT_EQ(InitialSeed(0), 1234u);
}

TEST_F(RandomServiceTest, StateIsSeedThenOffsetLittleEndian) {
  ASSERT_THAT(ManualSeed(0, 0x0102030405060708ull), GrpcIsOk());
  EXPECT_EQ(StateOf(0), std::string("\x08\x07\x06\x05\x04\x03\x02\x01", 8) + std::string(8, '\0'));
  ASSERT_THAT(Generate(Uniform(allocation(0), v1::DTYPE_FLOAT32, 5, 0, 1)), GrpcIsOk());
  EXPECT_EQ(StateOf(0), State(0x0102030405060708ull, 8));
}

TEST_F(RandomServiceTest, OffsetsAdvanceByMultiplesOfFour) {
  ASSERT_THAT(ManualSeed(1, 99), GrpcIsOk());
  struct Step {
    v1::GenerateRequest request;
    uint64_t advance;
  };
  const uint64_t a = allocation(1);
  const Step steps[] = {
      {Uniform(a, v1::DTYPE_FLOAT32, 5, 0, 1), 8},  // 5 words
      {Uniform(a, v1::DTYPE_FLOAT64, 3, 0, 1), 8},  // 6 words
      {Bits(a, v1::DTYPE_UINT8, 1), 4},             // 1 word
      {Normal(a, v1::DTYPE_FLOAT32, 3, 0, 1), 4},   // 3 words
      {Uniform(a, v1::DTYPE_INT64, 2, -9, 9), 4},   // 4 words
      {Normal(a, v1::DTYPE_BFLOAT16, 4, 0, 1), 4},  // 4 words
      {Bits(a, v1::DTYPE_INT32, 4097), 4100},
  };
  uint64_t offset = 0;
  for (const Step& step : steps) {
    v1::GenerateResponse from;
    ASSERT_THAT(Generate(step.request, &from), GrpcIsOk());
    EXPECT_EQ(from.seed(), 99u);
    EXPECT_EQ(from.offset(), offset) << step.request.ShortDebugString();
    offset += step.advance;
    EXPECT_EQ(StateOf(1), State(99, offset)) << step.request.ShortDebugString();
  }
  EXPECT_EQ(StateOf(0).substr(8), std::string(8, '\0')) << "device 0's generator moved";
}

TEST_F(RandomServiceTest, SetStateTakesSixteenOrEightBytes) {
  ASSERT_THAT(SetState(0, false, {State(555, 12)}), GrpcIsOk());
  EXPECT_EQ(StateOf(0), State(555, 12));
  const v1::GenerateRequest request = Bits(allocation(0), v1::DTYPE_UINT8, 1001);
  v1::GenerateResponse from;
  EXPECT_EQ(GenerateAndRead(request, &from), Expected(request, 555, 12));
  EXPECT_EQ(from.offset(), 12u);
  EXPECT_EQ(StateOf(0), State(555, 12 + 1004));

  ASSERT_THAT(SetState(0, false, {State(777, 0).substr(0, 8)}), GrpcIsOk());
  EXPECT_EQ(StateOf(0), State(777, 0));

  EXPECT_THAT(SetState(0, false, {std::string(15, 'x')}),
              GrpcStatusIs(kInvalid, "RNG state is wrong size"));
  EXPECT_THAT(SetState(0, false, {State(1, 6)}),
              GrpcStatusIs(kInvalid, "offset must be a multiple of 4"));
  EXPECT_THAT(SetState(0, false, {State(1, 0), State(1, 0)}), GrpcStatusIs(kInvalid));
  EXPECT_THAT(SetState(2, false, {State(1, 0)}), GrpcStatusIs(kInvalid));
  EXPECT_EQ(StateOf(0), State(777, 0)) << "a refused state changed the generator";
}

TEST_F(RandomServiceTest, AllDevicesVariantsActOnEveryDevice) {
  ASSERT_THAT(ManualSeed(0, 77, /*all_devices=*/true), GrpcIsOk());
  ASSERT_THAT(Generate(Uniform(allocation(1), v1::DTYPE_FLOAT32, 1, 0, 1)), GrpcIsOk());
  std::vector<std::string> states;
  ASSERT_THAT(GetState(0, /*all_devices=*/true, &states), GrpcIsOk());
  EXPECT_THAT(states, ::testing::ElementsAre(State(77, 0), State(77, 4)));

  ASSERT_THAT(SetState(0, true, {State(5, 8), State(6, 16)}), GrpcIsOk());
  ASSERT_THAT(GetState(0, true, &states), GrpcIsOk());
  EXPECT_THAT(states, ::testing::ElementsAre(State(5, 8), State(6, 16)));
  // All or nothing: one bad state sets none.
  EXPECT_THAT(SetState(0, true, {State(1, 0), std::string(9, 'x')}),
              GrpcStatusIs(kInvalid, "RNG state is wrong size"));
  EXPECT_THAT(SetState(0, true, {State(1, 0), State(1, 2)}),
              GrpcStatusIs(kInvalid, "offset must be a multiple of 4"));
  EXPECT_THAT(SetState(0, true, {State(1, 0)}), GrpcStatusIs(kInvalid));
  ASSERT_THAT(GetState(0, true, &states), GrpcIsOk());
  EXPECT_THAT(states, ::testing::ElementsAre(State(5, 8), State(6, 16)));

  uint64_t seed = 0;
  ASSERT_THAT(Seed(0, /*all_devices=*/true, &seed), GrpcIsOk());
  EXPECT_LT(seed, uint64_t{1} << 53);
  EXPECT_EQ(InitialSeed(0), seed);
  EXPECT_EQ(InitialSeed(1), seed);
  ASSERT_THAT(GetState(0, true, &states), GrpcIsOk());
  EXPECT_THAT(states, ::testing::ElementsAre(State(seed, 0), State(seed, 0)));
}

TEST_F(RandomServiceTest, SeedIsA53BitSeedOfOneDevice) {
  ASSERT_THAT(ManualSeed(0, 42), GrpcIsOk());
  uint64_t seeds_or = 0;
  uint64_t last = 0;
  for (int i = 0; i < 20; ++i) {
    uint64_t seed = 0;
    ASSERT_THAT(Seed(1, false, &seed), GrpcIsOk());
    EXPECT_LT(seed, uint64_t{1} << 53);
    EXPECT_NE(seed, last);
    seeds_or |= seed;
    last = seed;
  }
  EXPECT_GE(seeds_or, uint64_t{1} << 50) << "20 random 53-bit seeds all lack the high bits";
  EXPECT_EQ(InitialSeed(1), last);
  EXPECT_EQ(InitialSeed(0), 42u);
  EXPECT_EQ(StateOf(1), State(last, 0));
  uint64_t ignored = 0;
  EXPECT_THAT(Seed(2, false, &ignored), GrpcStatusIs(kInvalid));
  EXPECT_THAT(ManualSeed(-1, 1), GrpcStatusIs(kInvalid));
}

TEST_F(RandomServiceTest, UniformFloatsLieInLowToHigh) {
  ASSERT_THAT(ManualSeed(0, 2024), GrpcIsOk());
  const v1::GenerateRequest request = Uniform(allocation(0), v1::DTYPE_FLOAT32, 100000, -2, 3);
  const std::string bytes = GenerateAndRead(request);
  ASSERT_EQ(bytes, Expected(request, 2024, 0));
  std::vector<float> values(100000);
  std::memcpy(values.data(), bytes.data(), bytes.size());
  float lo = 10, hi = -10;
  for (float v : values) {
    ASSERT_GE(v, -2.0f);
    ASSERT_LT(v, 3.0f);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_LT(lo, -1.99f);
  EXPECT_GT(hi, 2.99f);
}

TEST_F(RandomServiceTest, IntegerUniformAndRawBitsMatchFillRandom) {
  ASSERT_THAT(ManualSeed(1, 31337), GrpcIsOk());
  const v1::GenerateRequest ints = Uniform(allocation(1), v1::DTYPE_INT32, 5000, -5, 5);
  const std::string int_bytes = GenerateAndRead(ints);
  ASSERT_EQ(int_bytes, Expected(ints, 31337, 0));
  std::vector<int32_t> values(5000);
  std::memcpy(values.data(), int_bytes.data(), int_bytes.size());
  for (int32_t v : values) {
    ASSERT_GE(v, -5);
    ASSERT_LT(v, 5);
  }
  v1::GenerateRequest bits = Bits(allocation(1), v1::DTYPE_UINT8, 4099);
  bits.mutable_dst()->set_offset(3);  // unaligned
  EXPECT_EQ(GenerateAndRead(bits), Expected(bits, 31337, 5000));
}

TEST_F(RandomServiceTest, NormalSamplesHaveTheAskedMeanAndStd) {
  ASSERT_THAT(ManualSeed(0, 7), GrpcIsOk());
  constexpr int kSamples = 1 << 20;
  const std::string bytes =
      GenerateAndRead(Normal(allocation(0), v1::DTYPE_FLOAT32, kSamples, 1.5, 0.5));
  ASSERT_EQ(bytes.size(), size_t{kSamples} * 4);
  std::vector<float> values(kSamples);
  std::memcpy(values.data(), bytes.data(), bytes.size());
  double sum = 0, sum_sq = 0;
  for (float v : values) {
    ASSERT_TRUE(std::isfinite(v));
    sum += v;
    sum_sq += static_cast<double>(v) * v;
  }
  const double mean = sum / kSamples;
  const double std = std::sqrt(sum_sq / kSamples - mean * mean);
  EXPECT_NEAR(mean, 1.5, 0.005);
  EXPECT_NEAR(std, 0.5, 0.005);
}

TEST_F(RandomServiceTest, BadRequestsAreRefusedWithoutMovingTheGenerator) {
  ASSERT_THAT(ManualSeed(0, 8), GrpcIsOk());
  const uint64_t a = allocation(0);
  EXPECT_THAT(Generate(Uniform(a, v1::DTYPE_UNSPECIFIED, 4, 0, 1)),
              GrpcStatusIs(kInvalid, HasSubstr("dtype")));
  v1::GenerateRequest no_distribution = Bits(a, v1::DTYPE_FLOAT32, 4);
  no_distribution.clear_bits();
  EXPECT_THAT(Generate(no_distribution), GrpcStatusIs(kInvalid, HasSubstr("distribution")));
  EXPECT_THAT(Generate(Normal(a, v1::DTYPE_INT32, 4, 0, 1)), GrpcStatusIs(kInvalid));
  EXPECT_THAT(Generate(Uniform(a, v1::DTYPE_FLOAT32, 4, 1, 1)), GrpcStatusIs(kInvalid));
  EXPECT_THAT(Generate(Uniform(a, v1::DTYPE_FLOAT32, 0, 0, 1)), GrpcStatusIs(kInvalid));
  // 8 MiB hold 2 Mi floats; one more overflows, as does an offset pushing past the end.
  EXPECT_THAT(Generate(Uniform(a, v1::DTYPE_FLOAT32, 2 * kMiB + 1, 0, 1)),
              GrpcStatusIs(kOutOfRange));
  v1::GenerateRequest shifted = Bits(a, v1::DTYPE_INT64, kMiB);
  shifted.mutable_dst()->set_offset(1);
  EXPECT_THAT(Generate(shifted), GrpcStatusIs(kOutOfRange));
  EXPECT_THAT(Generate(Uniform(a, v1::DTYPE_FLOAT32, uint64_t{1} << 61, 0, 1)),
              GrpcStatusIs(kInvalid));
  EXPECT_THAT(Generate(Uniform(999999, v1::DTYPE_FLOAT32, 4, 0, 1)), GrpcStatusIs(kNotFound));
  EXPECT_EQ(StateOf(0), State(8, 0));
  // Exactly filling the allocation is fine.
  EXPECT_THAT(Generate(Uniform(a, v1::DTYPE_FLOAT32, 2 * kMiB, 0, 1)), GrpcIsOk());
  EXPECT_EQ(StateOf(0), State(8, 2 * kMiB));
}

}  // namespace
}  // namespace gpumux::testing
