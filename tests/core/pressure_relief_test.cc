// PressureRelief over the core's books (tests/core/core_fixture.h): a
// refusal that another session's cached lease could cover asks that
// session's client and retries; a holder that returns nothing costs the
// reply timeout once; the session's own limit, and refusals that are no
// shortage, ask no one; an OOM counts once, where the refusal stands.

#include "server/core/pressure_relief.h"

#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/client_queries.h"
#include "server/core/notice_sink.h"
#include "tests/core/core_fixture.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::IsOk;
using ::gpumux::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr DeviceIndex kDevice(0);
constexpr absl::Duration kReplyTimeout = absl::Milliseconds(200);

// A client that allocates locally: it remembers the release questions it
// is asked and answers none itself.
class HolderSink final : public NoticeSink {
 public:
  void SegmentReleased(DeviceIndex, SegmentId, uint64_t, uint64_t) override {}
  void AskReleaseCached(uint64_t request, DeviceIndex) override {
    absl::MutexLock lock(&mu_);
    requests_.push_back(request);
  }
  void AskLeaseBlocks(uint64_t) override {}
  void StartProfiling(uint64_t, uint64_t) override {}
  void StopProfiling(uint64_t) override {}
  void Terminate(SessionEndReason, absl::string_view) override {}

  // Waits until asked; returns the question's request id.
  uint64_t AwaitQuestion() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](std::vector<uint64_t>* requests) { return !requests->empty(); }, &requests_));
    return requests_.front();
  }
  size_t questions() {
    absl::MutexLock lock(&mu_);
    return requests_.size();
  }

 private:
  absl::Mutex mu_;
  std::vector<uint64_t> requests_ ABSL_GUARDED_BY(mu_);
};

class PressureReliefTest : public testing::CoreTest {
 protected:
  void SetUp() override {
    CoreTest::SetUp();
    queries_ = std::make_unique<ClientQueries>(&sessions_);
    relief_ = std::make_unique<PressureRelief>(memory_.get(), queries_.get(), kReplyTimeout);
  }

  // A session whose client holds a 12 MiB lease of the 16 MiB device,
  // nothing of it in use (no stats page: all of a lease counts as cached).
  SessionId OpenHolder(std::shared_ptr<HolderSink> sink) {
    absl::StatusOr<OpenedSession> opened =
        lifecycle_->Open(SessionRecord{.client_name = "holder", .pid = 1234}, sink);
    EXPECT_THAT(opened, IsOk());
    if (!opened.ok()) return SessionId(0);
    opened_.push_back(opened->info.id);
    absl::StatusOr<AllocationView> lease =
        memory_->Lease(opened->info.id, kDevice, StreamId(0), 12 * kMiB, /*small_pool=*/false);
    EXPECT_THAT(lease, IsOk());
    lease_ = lease.ok() ? lease->id : AllocationId(0);
    return opened->info.id;
  }

  // An allocation of 12 MiB (a segment of its own size: PyTorch rounds
  // only those under 10 MiB up to 20 MiB), not counted as an OOM if refused:
  // it fits the device once the holder's lease is back.
  absl::StatusOr<AllocationView> Attempt(SessionId session) {
    return memory_->Allocate(session, kDevice, StreamId(0), 12 * kMiB, /*shareable=*/false, {}, {},
                             /*count_oom=*/false);
  }

  int64_t Ooms(SessionId session) {
    absl::StatusOr<DeviceStats> stats = memory_->GetStats(kDevice, session);
    EXPECT_THAT(stats, IsOk());
    return stats.ok() ? stats->num_ooms : -1;
  }

  std::unique_ptr<ClientQueries> queries_;
  std::unique_ptr<PressureRelief> relief_;
  AllocationId lease_;
};

TEST_F(PressureReliefTest, AHolderThatReturnsItsLeaseLetsTheRetrySucceed) {
  auto sink = std::make_shared<HolderSink>();
  const SessionId holder = OpenHolder(sink);
  const SessionId asker = Open("asker");
  absl::StatusOr<AllocationView> first = Attempt(asker);
  ASSERT_THAT(first, StatusIs(absl::StatusCode::kResourceExhausted));

  const std::vector<SessionId> holders =
      relief_->Holders(asker, kDevice, first.status(), /*count_oom=*/true);
  ASSERT_THAT(holders, ElementsAre(holder));
  // The holder's client: returns its lease, then answers.
  std::thread client([&] {
    const uint64_t request = sink->AwaitQuestion();
    EXPECT_THAT(memory_->Free(holder, {lease_}), IsOk());
    queries_->OnCacheReleased(holder, request);
  });
  absl::StatusOr<AllocationView> retried =
      relief_->AskAndRetry(kDevice, holders, [&] { return Attempt(asker); });
  client.join();
  EXPECT_THAT(retried, IsOk());
  EXPECT_EQ(Ooms(asker), 0);
}

TEST_F(PressureReliefTest, AHolderThatReturnsNothingCostsTheTimeoutOnce) {
  auto sink = std::make_shared<HolderSink>();
  const SessionId holder = OpenHolder(sink);
  const SessionId asker = Open("asker");
  absl::StatusOr<AllocationView> first = Attempt(asker);
  ASSERT_THAT(first, StatusIs(absl::StatusCode::kResourceExhausted));
  const std::vector<SessionId> holders =
      relief_->Holders(asker, kDevice, first.status(), /*count_oom=*/true);
  ASSERT_THAT(holders, ElementsAre(holder));

  const absl::Time start = absl::Now();
  absl::StatusOr<AllocationView> retried =
      relief_->AskAndRetry(kDevice, holders, [&] { return Attempt(asker); });
  EXPECT_GE(absl::Now() - start, kReplyTimeout);
  EXPECT_THAT(retried, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(sink->questions(), 1u);

  // Its figures are as they were: not asked again, and the refusal stands
  // as one OOM.
  absl::StatusOr<AllocationView> again = Attempt(asker);
  ASSERT_THAT(again, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(relief_->Holders(asker, kDevice, again.status(), /*count_oom=*/true), IsEmpty());
  EXPECT_EQ(Ooms(asker), 1);
  EXPECT_EQ(sink->questions(), 1u);
}

TEST_F(PressureReliefTest, TheSessionsOwnLimitAsksNoOne) {
  auto sink = std::make_shared<HolderSink>();
  OpenHolder(sink);
  const SessionId asker = Open("asker");
  ASSERT_THAT(memory_->SetMemoryLimit(asker, kDevice,
                                      {.kind = MemoryLimit::Kind::kBytes, .bytes = 4 * kMiB}),
              IsOk());
  absl::StatusOr<AllocationView> first = Attempt(asker);
  ASSERT_THAT(first, StatusIs(absl::StatusCode::kResourceExhausted));
  // Its relief is its own cache: no other session is asked.
  EXPECT_THAT(relief_->Holders(asker, kDevice, first.status(), /*count_oom=*/false), IsEmpty());
  EXPECT_EQ(Ooms(asker), 0);
  EXPECT_THAT(relief_->Holders(asker, kDevice, first.status(), /*count_oom=*/true), IsEmpty());
  EXPECT_EQ(Ooms(asker), 1);
  EXPECT_EQ(sink->questions(), 0u);
}

TEST_F(PressureReliefTest, ARefusalThatIsNoShortageAsksNoOneAndIsNoOom) {
  auto sink = std::make_shared<HolderSink>();
  OpenHolder(sink);
  const SessionId asker = Open("asker");
  EXPECT_THAT(relief_->Holders(asker, kDevice, absl::InvalidArgumentError("bad size"),
                               /*count_oom=*/true),
              IsEmpty());
  EXPECT_EQ(Ooms(asker), 0);
}

}  // namespace
}  // namespace gpumux
