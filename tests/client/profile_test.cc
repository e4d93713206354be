// Profiles through the client library against the real daemon: a live
// window records only the work queued inside it, one tenant cannot profile
// another's session (an administrator can), a session is profiled by one
// window at a time, a wire client without libgpumux gets its device side at
// once, and a program's profile belongs to the session that started it.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gpumux/admin.h"
#include "gpumux/client.h"
#include "gpumux/copy.h"
#include "gpumux/copy_options.h"
#include "gpumux/device_buffer.h"
#include "gpumux/memory.h"
#include "gpumux/profiler.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "server/core/device_profiler.h"
#include "tests/client/client_test_support.h"
#include "tests/status_matchers.h"
#include "tests/support/daemon_client_test.h"
#include "tests/support/wire_session.h"

namespace gpumux::testing {
namespace {

using ::testing::HasSubstr;

ClientOptions OfTenant(const std::string& tenant) {
  ClientOptions options;
  options.tenant = tenant;
  return options;
}

class ProfileTest : public DaemonClientTest {
 protected:
  ProfileTest() : DaemonClientTest(Options{{}, OfTenant("team-a"), true}) {}
};

// `worker` copies `bytes` of `data` into `buffer`, waiting for each, until
// stopped; `copies` counts them.
class Copier {
 public:
  Copier(Client& worker, const DeviceBuffer& buffer, const std::vector<char>& data, uint64_t bytes)
      : thread_([&, bytes] {
          while (!done_.load()) {
            CopyOptions wait;
            wait.wait = true;
            ASSERT_OK(copy::HostToDevice(worker, buffer, 0, data.data(), bytes, wait));
            copies_.fetch_add(1);
          }
        }) {}
  ~Copier() { Stop(); }
  void Stop() {
    done_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int copies() const { return copies_.load(); }

 private:
  std::atomic<bool> done_{false};
  std::atomic<int> copies_{0};
  std::thread thread_;
};

// The device records of `profile` whose copies moved `bytes`.
int CopiesOf(const DeviceProfile& profile, uint64_t bytes) {
  int n = 0;
  for (const DeviceWorkRecord& work : profile.work) {
    if (work.name == "copy host_to_device" && work.bytes == bytes) ++n;
  }
  return n;
}

TEST_F(ProfileTest, ALiveWindowHoldsOnlyTheWorkQueuedInIt) {
  std::unique_ptr<Client> worker = ConnectAnother(OfTenant("team-a"));
  ASSERT_NE(worker, nullptr);
  absl::StatusOr<DeviceBuffer> allocated = memory::Allocate(*worker, 1 << 20);
  ASSERT_OK(allocated.status());
  const DeviceBuffer& buffer = *allocated;
  const std::vector<char> data(4096, 'x');
  constexpr uint64_t kBefore = 1000, kDuring = 2000;
  for (int i = 0; i < 5; ++i)
    ASSERT_OK(copy::HostToDevice(*worker, buffer, 0, data.data(), kBefore));

  // The worker copies kDuring bytes until the window is over; what it
  // queued before carries kBefore.
  Copier copier(*worker, buffer, data, kDuring);
  absl::StatusOr<SessionProfile> live =
      profiler::ProfileSession(client(), worker->session_id(), absl::Milliseconds(300));
  copier.Stop();
  ASSERT_OK(live.status());

  EXPECT_EQ(CopiesOf(live->device, kBefore), 0);
  EXPECT_GT(CopiesOf(live->device, kDuring), 0);
  EXPECT_LE(CopiesOf(live->device, kDuring), copier.copies());
  for (const DeviceWorkRecord& work : live->device.work) {
    EXPECT_EQ(work.session, worker->session_id().value()) << work.name;
    EXPECT_GE(work.host_start_ns, live->start_ns) << work.name;
    EXPECT_LE(work.host_end_ns, live->end_ns) << work.name;
  }
  // The worker's library sent its process's calls of the window.
  ASSERT_TRUE(live->host.has_value()) << live->host_missing;
  EXPECT_EQ(live->host_missing, "");
  bool saw_copies = false;
  for (const HostFunction& function : live->host->functions) {
    if (function.name == "copy::HostToDevice") saw_copies = function.calls > 0;
  }
  EXPECT_TRUE(saw_copies);
}

TEST_F(ProfileTest, AnotherTenantsSessionIsAnAdministratorsToProfile) {
  std::unique_ptr<Client> stranger = ConnectAnother(OfTenant("team-b"));
  ASSERT_NE(stranger, nullptr);
  EXPECT_THAT(profiler::ProfileSession(client(), stranger->session_id(), absl::Milliseconds(10)),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("tenant 'team-b'")));
  Admin admin(daemon().address());
  absl::StatusOr<SessionProfile> profiled =
      admin.ProfileSession(stranger->session_id(), absl::Milliseconds(10));
  ASSERT_OK(profiled.status());
  EXPECT_TRUE(profiled->host.has_value()) << profiled->host_missing;
  // A session of the same tenant, and a session itself, may.
  std::unique_ptr<Client> colleague = ConnectAnother(OfTenant("team-a"));
  ASSERT_NE(colleague, nullptr);
  EXPECT_OK(
      profiler::ProfileSession(client(), colleague->session_id(), absl::Milliseconds(10)).status());
  EXPECT_OK(
      profiler::ProfileSession(*colleague, client().session_id(), absl::Milliseconds(10)).status());
}

TEST_F(ProfileTest, ASessionIsProfiledByOneWindowAtATime) {
  std::unique_ptr<Client> target = ConnectAnother(OfTenant("team-a"));
  ASSERT_NE(target, nullptr);
  absl::Notification first_done;
  absl::Status first;
  std::thread window([&] {
    // The probes below are windows too: one may hold the session a moment.
    do {
      first =
          Admin(daemon().address()).ProfileSession(target->session_id(), absl::Seconds(2)).status();
    } while (first.code() == absl::StatusCode::kFailedPrecondition);
    first_done.Notify();
  });
  // Until the first window ends, a second is refused (once the first began).
  absl::Status second;
  while (!first_done.HasBeenNotified()) {
    second =
        profiler::ProfileSession(client(), target->session_id(), absl::Milliseconds(1)).status();
    if (second.code() == absl::StatusCode::kFailedPrecondition) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  window.join();
  EXPECT_OK(first);
  EXPECT_THAT(second, StatusIs(absl::StatusCode::kFailedPrecondition,
                               HasSubstr("is being profiled already")));
  // Once it ended, the session may be profiled again.
  EXPECT_OK(
      profiler::ProfileSession(client(), target->session_id(), absl::Milliseconds(1)).status());
}

TEST_F(ProfileTest, AWireClientGetsItsDeviceSideWithoutAHostSide) {
  WireSession wire(grpc::CreateChannel(daemon().address(), grpc::InsecureChannelCredentials()),
                   "wire", "team-a");
  ASSERT_TRUE(wire.open_status().ok()) << wire.open_status().error_message();
  absl::StatusOr<SessionProfile> live =
      profiler::ProfileSession(client(), SessionId(wire.id()), absl::Milliseconds(20));
  ASSERT_OK(live.status());
  EXPECT_FALSE(live->host.has_value());
  EXPECT_THAT(live->host_missing, HasSubstr("does not record its calls"));
}

class BoundedProfileTest : public DaemonClientTest {
 protected:
  // 40 records' worth: 10 for one session's profiles.
  BoundedProfileTest()
      : DaemonClientTest(Options{
            {.profile_memory = 40 * DeviceProfiler::kRecordBytes}, OfTenant("team-a"), true}) {}
};

// A profile's records take at most its session's share of --profile-memory
// (a profile of 16,777,216 records, 64 per session, could take 8 GiB): past
// it, the newest displace the oldest and count as dropped.
TEST_F(BoundedProfileTest, ASessionsProfilesKeepItsShareOfTheMemoryAtMost) {
  std::unique_ptr<Client> worker = ConnectAnother(OfTenant("team-a"));
  ASSERT_NE(worker, nullptr);
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(*worker, 1 << 20);
  ASSERT_OK(buffer.status());
  const std::vector<char> data(64, 'x');
  Copier copier(*worker, *buffer, data, data.size());
  while (copier.copies() == 0) absl::SleepFor(absl::Milliseconds(1));
  absl::StatusOr<SessionProfile> live =
      profiler::ProfileSession(client(), worker->session_id(), absl::Milliseconds(500));
  copier.Stop();
  ASSERT_OK(live.status());
  // Hundreds of copies in the window; ten kept, the newest.
  EXPECT_EQ(live->device.work.size(), 10u);
  EXPECT_GT(live->device.dropped_work, 10u);
}

// The sessions of one tenant together keep one session's share: two
// workers of team-a profiled at once keep ten records between them.
TEST_F(BoundedProfileTest, ATenantsSessionsKeepOneShareBetweenThem) {
  std::unique_ptr<Client> workers[2] = {ConnectAnother(OfTenant("team-a")),
                                        ConnectAnother(OfTenant("team-a"))};
  std::vector<std::unique_ptr<Copier>> copiers;
  std::vector<DeviceBuffer> buffers;
  const std::vector<char> data(64, 'x');
  for (auto& worker : workers) {
    ASSERT_NE(worker, nullptr);
    absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(*worker, 1 << 20);
    ASSERT_OK(buffer.status());
    buffers.push_back(*std::move(buffer));
  }
  for (int w = 0; w < 2; ++w) {
    copiers.push_back(std::make_unique<Copier>(*workers[w], buffers[w], data, data.size()));
    while (copiers.back()->copies() == 0) absl::SleepFor(absl::Milliseconds(1));
  }
  absl::StatusOr<SessionProfile> live[2];
  std::thread second([&] {
    live[1] = profiler::ProfileSession(client(), workers[1]->session_id(), absl::Milliseconds(800));
  });
  // The copies stop while both windows are open: once one window ended, its
  // records would leave room for the other's.
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(500));
    for (auto& copier : copiers) copier->Stop();
  });
  live[0] = profiler::ProfileSession(client(), workers[0]->session_id(), absl::Milliseconds(800));
  second.join();
  stopper.join();
  ASSERT_OK(live[0].status());
  ASSERT_OK(live[1].status());
  EXPECT_EQ(live[0]->device.work.size() + live[1]->device.work.size(), 10u);
  EXPECT_GT(live[0]->device.dropped_work + live[1]->device.dropped_work, 10u);
}

TEST_F(ProfileTest, AProgramsProfileIsItsStartersToFinish) {
  absl::StatusOr<profiler::StartedProfile> started = profiler::Start(client());
  ASSERT_OK(started.status());
  EXPECT_EQ(started->token.size(), 32u);
  std::unique_ptr<Client> other = ConnectAnother(OfTenant("team-a"));
  ASSERT_NE(other, nullptr);
  EXPECT_THAT(profiler::Finish(*other, started->id), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(profiler::Start(client(), uint64_t{1} << 25),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at most 16777216")));
  absl::StatusOr<DeviceProfile> finished = profiler::Finish(client(), started->id);
  ASSERT_OK(finished.status());
  EXPECT_TRUE(finished->work.empty());  // no session joined it
  EXPECT_THAT(profiler::Finish(client(), started->id), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(ProfileTest, ProfilesEndWithTheDaemon) {
  std::unique_ptr<Client> target = ConnectAnother(OfTenant("team-a"));
  ASSERT_NE(target, nullptr);
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(200));
    daemon().Shutdown();
  });
  // A window of an hour ends when the daemon stops, with what it had.
  absl::StatusOr<SessionProfile> live =
      profiler::ProfileSession(client(), target->session_id(), absl::Hours(1));
  stopper.join();
  if (live.ok()) {
    EXPECT_FALSE(live->host_missing.empty());
  } else {
    EXPECT_THAT(live.status(), StatusIs(absl::StatusCode::kUnavailable));
  }
}

}  // namespace
}  // namespace gpumux::testing
