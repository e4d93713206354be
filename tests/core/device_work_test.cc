// DeviceWork's own decisions, without transport: which copies wait (so the
// RPC layer runs them where blocking is allowed).

#include "server/core/device_work.h"

#include <string>

#include "gtest/gtest.h"
#include "tests/core/core_fixture.h"

namespace gpumux {
namespace {

using DeviceWorkTest = testing::CoreTest;

constexpr uint64_t kBytes = 4096;

TEST_F(DeviceWorkTest, ACopyWithinOneDeviceWaitsOnlyWhenAsked) {
  const SessionId session = Open("copier");
  const AllocationId a = Allocate(session, DeviceIndex(0), kBytes);
  const AllocationId b = Allocate(session, DeviceIndex(0), kBytes);
  EXPECT_FALSE(work_->DeviceToDeviceWaits(session, a, b, WorkOptions{}));
  EXPECT_TRUE(work_->DeviceToDeviceWaits(session, a, b, WorkOptions{.wait = true}));
}

TEST_F(DeviceWorkTest, ACopyAcrossDevicesAlwaysWaits) {
  const SessionId session = Open("copier");
  const AllocationId on0 = Allocate(session, DeviceIndex(0), kBytes);
  const AllocationId on1 = Allocate(session, DeviceIndex(1), kBytes);
  EXPECT_TRUE(work_->DeviceToDeviceWaits(session, on0, on1, WorkOptions{}));
  EXPECT_TRUE(work_->DeviceToDeviceWaits(session, on1, on0, WorkOptions{}));
  // And it does wait: the bytes are there when the call returns.
  ASSERT_OK(work_->Memset(session, RangeUse{on1, 0, kBytes}, 7, WorkOptions{.wait = true}));
  ASSERT_OK(work_->DeviceToDevice(session, RangeUse{on0, 0, kBytes}, on1, 0, WorkOptions{}));
  std::string bytes;
  ASSERT_OK(work_->DeviceToHost(session, RangeUse{on0, 0, kBytes}, WorkOptions{}, &bytes));
  EXPECT_EQ(bytes, std::string(kBytes, '\x07'));
}

TEST_F(DeviceWorkTest, AllocationsThatAreNotTheSessionsDoNotMakeItWait) {
  const SessionId session = Open("copier");
  const SessionId other = Open("other");
  const AllocationId mine = Allocate(session, DeviceIndex(0), kBytes);
  const AllocationId theirs = Allocate(other, DeviceIndex(1), kBytes);
  // The copy fails at once (NOT_FOUND), so it need not leave the caller's thread.
  EXPECT_FALSE(work_->DeviceToDeviceWaits(session, mine, theirs, WorkOptions{}));
  EXPECT_FALSE(work_->DeviceToDeviceWaits(session, AllocationId(999), mine, WorkOptions{}));
  EXPECT_THAT(work_->DeviceToDevice(session, RangeUse{mine, 0, kBytes}, theirs, 0, WorkOptions{}),
              testing::StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace gpumux
