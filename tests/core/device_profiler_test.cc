// DeviceProfiler alone, over a host backend: only profiled sessions record,
// a profile keeps its newest records and counts the rest, it belongs to its
// owner and ends with it, and a session takes one window at a time.

#include "server/core/device_profiler.h"

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/backend/host/host_backend.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::IsOk;
using ::gpumux::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::Field;

constexpr SessionId kOwner(1);
constexpr SessionId kMember(2);
constexpr SessionId kOther(3);

class DeviceProfilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HostBackend::Options options;
    options.device_count = 1;
    options.device_memory = uint64_t{16} << 20;
    absl::StatusOr<std::unique_ptr<HostBackend>> backend = HostBackend::Create(options);
    ASSERT_THAT(backend, IsOk());
    backend_ = *std::move(backend);
    profiler_ = std::make_unique<DeviceProfiler>(backend_.get());
    for (SessionId session : {kOwner, kMember, kOther}) profiler_->AddSession(session, "");
  }
  void TearDown() override {
    profiler_.reset();
    backend_.reset();
  }

  // One piece of work of `session` done by the daemon itself (no stream).
  void Work(SessionId session, const std::string& name, bool ran = true) {
    DeviceProfiler::End(DeviceProfiler::Begin(profiler_.get(), session, name, ProfiledSite{}, 64),
                        ran);
  }

  std::unique_ptr<HostBackend> backend_;
  std::unique_ptr<DeviceProfiler> profiler_;
};

TEST_F(DeviceProfilerTest, OnlyProfiledSessionsRecordWhatRan) {
  absl::StatusOr<DeviceProfiler::Started> started = profiler_->Start(kOwner, 0);
  ASSERT_THAT(started, IsOk());
  EXPECT_EQ(started->token.size(), 32u);
  EXPECT_FALSE(profiler_->Join(kMember, "0123456789abcdef0123456789abcdef"));
  EXPECT_TRUE(profiler_->Join(kMember, started->token));
  Work(kMember, "memset");
  Work(kMember, "refused copy", /*ran=*/false);
  Work(kOther, "copy host_to_device");
  absl::StatusOr<DeviceProfile> profile = profiler_->Finish(kOwner, started->id);
  ASSERT_THAT(profile, IsOk());
  EXPECT_THAT(profile->work, ElementsAre(Field(&DeviceWorkRecord::name, "memset")));
  EXPECT_EQ(profile->work[0].session, kMember.value());
  EXPECT_EQ(profile->work[0].bytes, 64u);
  EXPECT_EQ(profile->work[0].device_start_ns, -1);  // not on a stream
  // Finished, nothing records any more.
  Work(kMember, "memset");
  EXPECT_THAT(profiler_->Finish(kOwner, started->id), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(DeviceProfilerTest, AProfileKeepsItsNewestRecordsAndCountsTheRest) {
  absl::StatusOr<DeviceProfiler::Started> started = profiler_->Start(kOwner, 2);
  ASSERT_THAT(started, IsOk());
  ASSERT_TRUE(profiler_->Join(kMember, started->token));
  for (int i = 0; i < 5; ++i) Work(kMember, absl::StrCat("work ", i));
  absl::StatusOr<DeviceProfile> profile = profiler_->Finish(kOwner, started->id);
  ASSERT_THAT(profile, IsOk());
  EXPECT_THAT(profile->work, ElementsAre(Field(&DeviceWorkRecord::name, "work 3"),
                                         Field(&DeviceWorkRecord::name, "work 4")));
  EXPECT_EQ(profile->dropped_work, 3u);
}

TEST_F(DeviceProfilerTest, AProfileIsItsOwnersAndEndsWithIt) {
  EXPECT_THAT(profiler_->Start(kOwner, DeviceProfiler::kMaxCapacity + 1),
              StatusIs(absl::StatusCode::kInvalidArgument));
  absl::StatusOr<DeviceProfiler::Started> started = profiler_->Start(kOwner, 0);
  ASSERT_THAT(started, IsOk());
  EXPECT_THAT(profiler_->Finish(kOther, started->id), StatusIs(absl::StatusCode::kNotFound));
  for (int i = 1; i < DeviceProfiler::kMaxProfilesPerSession; ++i) {
    ASSERT_THAT(profiler_->Start(kOwner, 1), IsOk());
  }
  EXPECT_THAT(profiler_->Start(kOwner, 1), StatusIs(absl::StatusCode::kResourceExhausted));
  profiler_->SessionEnded(kOwner);
  EXPECT_THAT(profiler_->Finish(kOwner, started->id), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_FALSE(profiler_->Join(kMember, started->token));
}

TEST_F(DeviceProfilerTest, ASessionTakesOneWindowAtATime) {
  absl::StatusOr<uint64_t> window = profiler_->BeginWindow(kOther, 0);
  ASSERT_THAT(window, IsOk());
  EXPECT_THAT(profiler_->BeginWindow(kOther, 0), StatusIs(absl::StatusCode::kFailedPrecondition));
  Work(kOther, "synchronize");
  Work(kMember, "memset");
  DeviceProfile profile = profiler_->EndWindow(*window);
  EXPECT_THAT(profile.work, ElementsAre(Field(&DeviceWorkRecord::name, "synchronize")));
  EXPECT_THAT(profiler_->BeginWindow(kOther, 0), IsOk());
  EXPECT_TRUE(profiler_->EndWindow(12345).work.empty());
}

}  // namespace
}  // namespace gpumux
