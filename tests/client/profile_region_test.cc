// The profile region libgpumux records its host side into: exact counts from
// many threads, spans on CLOCK_MONOTONIC whichever clock stamped them, the
// ring's bound, windows, and the file `gpumux bottleneck` reads.

#include "client/profile_region.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace gpumux {

// For gtest's names of the parameterized tests (found by ADL).
void PrintTo(ProfileClock clock, std::ostream* os) {
  *os << (clock == ProfileClock::kTsc ? "TSC" : "CLOCK_MONOTONIC");
}

namespace {

// A call recorded into `region`, with the CLOCK_MONOTONIC moments before it
// began and after it ended.
struct Bracket {
  int64_t before_ns;
  int64_t after_ns;
};

Bracket RecordCall(ProfileRegion& region, uint32_t function, uint32_t thread, bool waits) {
  Bracket bracket;
  bracket.before_ns = MonotonicNanos();
  const uint64_t id = region.BeginCall();
  const int64_t start = region.Now();
  const int64_t end = region.Now();
  region.EndCall(id, function, thread, start, end, waits);
  bracket.after_ns = MonotonicNanos();
  return bracket;
}

const HostFunction& Named(const HostProfile& profile, const std::string& name) {
  auto it = std::find_if(profile.functions.begin(), profile.functions.end(),
                         [&](const HostFunction& f) { return f.name == name; });
  EXPECT_NE(it, profile.functions.end()) << name;
  return *it;
}

class ProfileRegionTest : public ::testing::TestWithParam<ProfileClock> {};

TEST_P(ProfileRegionTest, CountsEveryCallOfEveryThreadExactly) {
  absl::StatusOr<ProfileRegion> region = ProfileRegion::Anonymous(1 << 16, GetParam());
  ASSERT_TRUE(region.ok()) << region.status();
  region->Define(0, "Client::Allocate", false);
  region->Define(1, "Stream::Synchronize", true);
  constexpr int kThreads = 4;
  constexpr int kCalls = 5000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      const uint32_t thread = region->NewThread();
      for (int i = 0; i < kCalls; ++i) RecordCall(*region, i % 5 == 0 ? 1 : 0, thread, i % 5 == 0);
    });
  }
  for (std::thread& thread : threads) thread.join();

  const HostProfile profile = region->Read();
  EXPECT_EQ(Named(profile, "Client::Allocate").calls, uint64_t{kThreads * kCalls * 4 / 5});
  EXPECT_EQ(Named(profile, "Stream::Synchronize").calls, uint64_t{kThreads * kCalls / 5});
  EXPECT_TRUE(Named(profile, "Stream::Synchronize").waits);
  EXPECT_EQ(profile.calls.size(), size_t{kThreads * kCalls});
  EXPECT_EQ(profile.dropped_calls, 0u);
  EXPECT_EQ(profile.threads, uint64_t{kThreads});
  const auto waiting_function =
      static_cast<uint32_t>(&Named(profile, "Stream::Synchronize") - profile.functions.data());
  int64_t span_ns = 0;
  int64_t waited_span_ns = 0;
  for (size_t i = 0; i < profile.calls.size(); ++i) {
    const HostCall& call = profile.calls[i];
    EXPECT_LE(call.start_ns, call.end_ns);
    if (i > 0) {
      EXPECT_LE(profile.calls[i - 1].start_ns, call.start_ns);
    }
    span_ns += call.end_ns - call.start_ns;
    if (call.function == waiting_function) waited_span_ns += call.end_ns - call.start_ns;
  }
  // The totals are the spans' sums, up to each span's rounding to 1 ns.
  const int64_t slack = static_cast<int64_t>(profile.calls.size());
  EXPECT_NEAR(static_cast<double>(profile.library_ns), static_cast<double>(span_ns),
              static_cast<double>(slack));
  EXPECT_NEAR(static_cast<double>(profile.waiting_ns), static_cast<double>(waited_span_ns),
              static_cast<double>(slack));
}

TEST_P(ProfileRegionTest, SpansLieOnTheMonotonicClock) {
  absl::StatusOr<ProfileRegion> region = ProfileRegion::Anonymous(1024, GetParam());
  ASSERT_TRUE(region.ok()) << region.status();
  region->Define(0, "Client::Allocate", false);
  const uint32_t thread = region->NewThread();
  std::vector<Bracket> brackets;
  for (int i = 0; i < 100; ++i) {
    brackets.push_back(RecordCall(*region, 0, thread, false));
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  const HostProfile profile = region->Read();
  ASSERT_EQ(profile.calls.size(), brackets.size());
  // Converted through a rate measured over the region's life: within a few
  // microseconds; the bound allows for a loaded machine.
  constexpr int64_t kSlackNs = 100000;
  for (size_t i = 0; i < brackets.size(); ++i) {
    EXPECT_GE(profile.calls[i].start_ns, brackets[i].before_ns - kSlackNs) << i;
    EXPECT_LE(profile.calls[i].end_ns, brackets[i].after_ns + kSlackNs) << i;
  }
  EXPECT_LE(profile.start_ns, brackets.front().before_ns);
  EXPECT_GE(profile.end_ns, brackets.back().after_ns - kSlackNs);
}

TEST_P(ProfileRegionTest, TheRingKeepsTheNewestSpansAndCountsEveryCall) {
  absl::StatusOr<ProfileRegion> region = ProfileRegion::Anonymous(8, GetParam());
  ASSERT_TRUE(region.ok()) << region.status();
  region->Define(0, "Client::Free", false);
  const uint32_t thread = region->NewThread();
  for (int i = 0; i < 20; ++i) RecordCall(*region, 0, thread, false);
  const HostProfile profile = region->Read();
  EXPECT_EQ(Named(profile, "Client::Free").calls, 20u);
  ASSERT_EQ(profile.calls.size(), 8u);
  EXPECT_EQ(profile.dropped_calls, 12u);
  EXPECT_EQ(profile.calls.front().call_id, 13u);
  EXPECT_EQ(profile.calls.back().call_id, 20u);
}

TEST_P(ProfileRegionTest, AWindowHoldsOnlyWhatCameAfterItsMark) {
  absl::StatusOr<ProfileRegion> region = ProfileRegion::Anonymous(64, GetParam());
  ASSERT_TRUE(region.ok()) << region.status();
  region->Define(0, "Client::Allocate", false);
  region->Define(1, "Client::Free", false);
  const uint32_t thread = region->NewThread();
  for (int i = 0; i < 10; ++i) RecordCall(*region, 0, thread, false);
  const ProfileRegion::Mark mark = region->MarkNow();
  for (int i = 0; i < 3; ++i) RecordCall(*region, 0, thread, false);
  for (int i = 0; i < 4; ++i) RecordCall(*region, 1, thread, false);

  const HostProfile window = region->Read(&mark);
  EXPECT_EQ(Named(window, "Client::Allocate").calls, 3u);
  EXPECT_EQ(Named(window, "Client::Free").calls, 4u);
  ASSERT_EQ(window.calls.size(), 7u);
  EXPECT_EQ(window.calls.front().call_id, 11u);
  EXPECT_EQ(window.start_ns, mark.at_ns);
  EXPECT_GE(window.calls.front().start_ns, mark.at_ns - 100000);
  int64_t span_ns = 0;
  for (const HostCall& call : window.calls) span_ns += call.end_ns - call.start_ns;
  EXPECT_NEAR(static_cast<double>(window.library_ns), static_cast<double>(span_ns), 7.0);
  EXPECT_EQ(region->Read().calls.size(), 17u);
}

INSTANTIATE_TEST_SUITE_P(Clocks, ProfileRegionTest,
                         ::testing::Values(ProfileClock::kMonotonic, MachineProfileClock()),
                         [](const ::testing::TestParamInfo<ProfileClock>& clock) {
                           return std::string(clock.param == ProfileClock::kTsc ? "Tsc"
                                                                                : "Monotonic") +
                                  std::to_string(clock.index);
                         });

class ProfileFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("gpumux-profile-region-" + std::to_string(getpid())))
                .string();
  }
  void TearDown() override { std::filesystem::remove(path_); }
  std::string path_;
};

TEST_F(ProfileFileTest, AProgramWritesWhatAnotherMappingReads) {
  ASSERT_TRUE(ProfileRegion::CreateFile(path_, 16, "token-1").ok());
  {
    absl::StatusOr<ProfileRegion> writer = ProfileRegion::MapFile(path_);
    ASSERT_TRUE(writer.ok()) << writer.status();
    writer->Define(0, "Client::Memset", false);
    const uint32_t thread = writer->NewThread();
    for (int i = 0; i < 5; ++i) RecordCall(*writer, 0, thread, false);
  }
  // Without an exit mark (a crash), the last call's end is the profile's.
  std::string token;
  absl::StatusOr<HostProfile> crashed = ReadProfileFile(path_, &token);
  ASSERT_TRUE(crashed.ok()) << crashed.status();
  EXPECT_EQ(token, "token-1");
  EXPECT_EQ(Named(*crashed, "Client::Memset").calls, 5u);
  ASSERT_EQ(crashed->calls.size(), 5u);
  EXPECT_EQ(crashed->end_ns, crashed->calls.back().end_ns);

  absl::StatusOr<ProfileRegion> writer = ProfileRegion::MapFile(path_);
  ASSERT_TRUE(writer.ok()) << writer.status();
  const int64_t exit_ns = MonotonicNanos();
  writer->MarkEnd(exit_ns);
  absl::StatusOr<HostProfile> exited = ReadProfileFile(path_);
  ASSERT_TRUE(exited.ok()) << exited.status();
  EXPECT_EQ(exited->end_ns, exit_ns);
}

TEST_F(ProfileFileTest, AFileOfAnotherLayoutIsRefused) {
  ASSERT_TRUE(ProfileRegion::CreateFile(path_, 16, "").ok());
  // The version follows the 8-byte magic.
  const int fd = open(path_.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  const uint32_t version = ProfileRegion::kVersion - 1;
  ASSERT_EQ(pwrite(fd, &version, sizeof(version), 8), static_cast<ssize_t>(sizeof(version)));
  close(fd);
  absl::StatusOr<ProfileRegion> region = ProfileRegion::MapFile(path_);
  EXPECT_EQ(region.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(region.status().message().find("is not a gpumux profile file (version"),
            std::string::npos)
      << region.status();
}

TEST_F(ProfileFileTest, AFileOfAnUnknownClockIsRefused) {
  ASSERT_TRUE(ProfileRegion::CreateFile(path_, 16, "").ok());
  // The clock follows the magic, version, function count, capacity and token.
  const int fd = open(path_.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  const uint32_t clock = 7;
  const off_t offset = 8 + 4 + 4 + 8 + ProfileRegion::kTokenBytes;
  ASSERT_EQ(pwrite(fd, &clock, sizeof(clock), offset), static_cast<ssize_t>(sizeof(clock)));
  close(fd);
  absl::StatusOr<ProfileRegion> region = ProfileRegion::MapFile(path_);
  EXPECT_EQ(region.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(region.status().message().find("(clock 7)"), std::string::npos) << region.status();
}

TEST_F(ProfileFileTest, AReadEndsWhenTheTscStartIsAheadOfTheCounter) {
  if (MachineProfileClock() != ProfileClock::kTsc) GTEST_SKIP() << "the TSC is not this clock";
  ASSERT_TRUE(ProfileRegion::CreateFile(path_, 16, "", ProfileClock::kTsc).ok());
  {
    absl::StatusOr<ProfileRegion> writer = ProfileRegion::MapFile(path_);
    ASSERT_TRUE(writer.ok()) << writer.status();
    writer->Define(0, "Client::Memset", false);
    RecordCall(*writer, 0, writer->NewThread(), false);
  }
  // As after a counter reset: the start tick (after the start time, which
  // follows the clock and unused words) lies ahead of every tick read now.
  const int fd = open(path_.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  const int64_t start_ticks = int64_t{1} << 62;
  const off_t offset = 8 + 4 + 4 + 8 + ProfileRegion::kTokenBytes + 4 + 4 + 8;
  ASSERT_EQ(pwrite(fd, &start_ticks, sizeof(start_ticks), offset),
            static_cast<ssize_t>(sizeof(start_ticks)));
  close(fd);
  const int64_t before = MonotonicNanos();
  absl::StatusOr<HostProfile> profile = ReadProfileFile(path_);
  ASSERT_TRUE(profile.ok()) << profile.status();
  EXPECT_LT(MonotonicNanos() - before, 1000000000) << "the read waits for at most ~11 ms";
  EXPECT_EQ(Named(*profile, "Client::Memset").calls, 1u);
  ASSERT_EQ(profile->calls.size(), 1u);
  EXPECT_LE(profile->calls[0].start_ns, profile->calls[0].end_ns);
}

TEST_F(ProfileFileTest, CapacityAndTokenAreChecked) {
  EXPECT_EQ(ProfileRegion::CreateFile(path_, 0, "").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ProfileRegion::CreateFile(path_, ProfileRegion::kMaxCapacity + 1, "").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      ProfileRegion::CreateFile(path_, 16, std::string(ProfileRegion::kTokenBytes, 't')).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ProfileRegion::Anonymous(0).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpumux
