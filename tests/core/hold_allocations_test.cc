// MemoryManager::HoldAllocations: the daemon's own work on a session's memory
// (a group collective in place on host memory) keeps the allocations alive:
// a Free naming one, and the session's end, wait for the use to return.

#include <atomic>
#include <cstring>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/core/core_fixture.h"

namespace gpumux {
namespace {

using ::gpumux::testing::StatusIs;
using HoldAllocationsTest = testing::CoreTest;

constexpr uint64_t kBytes = uint64_t{1} << 20;
// How long a waiter is given to (wrongly) get past a hold.
constexpr absl::Duration kGrace = absl::Milliseconds(200);

// Holds `range` on another thread until Release: the use writes `fill` into
// the memory in place first.
class Holder {
 public:
  Holder(MemoryManager& memory, DeviceBackend& backend, SessionId session, RangeUse range,
         char fill)
      : thread_([&memory, &backend, session, range, fill, this] {
          status_ = memory.HoldAllocations(
              session, absl::MakeConstSpan(&range, 1), [&](absl::Span<const DeviceSpan> spans) {
                absl::StatusOr<HostMemoryView> view =
                    backend.AccessOnHost(spans[0].device, spans[0].address, range.size);
                if (!view.ok()) return view.status();
                std::memset(view->data, fill, range.size);
                holding_.Notify();
                release_.WaitForNotification();
                return absl::OkStatus();
              });
          if (!holding_.HasBeenNotified()) holding_.Notify();  // a refused hold
        }) {
    holding_.WaitForNotification();
  }
  ~Holder() { Release().IgnoreError(); }

  absl::Status Release() {
    if (!release_.HasBeenNotified()) release_.Notify();
    if (thread_.joinable()) thread_.join();
    return status_;
  }

 private:
  absl::Notification holding_;
  absl::Notification release_;
  absl::Status status_;
  std::thread thread_;
};

TEST_F(HoldAllocationsTest, AFreeOfAHeldAllocationWaitsForTheUse) {
  const SessionId session = Open("holder");
  const AllocationId held = Allocate(session, DeviceIndex(0), kBytes);
  const AllocationId other = Allocate(session, DeviceIndex(0), kBytes);
  Holder holder(*memory_, *backend_, session, RangeUse{held, 0, kBytes}, 'h');

  // Another allocation of the session frees at once.
  ASSERT_OK(memory_->Free(session, {other}));
  std::atomic<bool> freed{false};
  std::thread freer([&] {
    EXPECT_OK(memory_->Free(session, {held}));
    freed = true;
  });
  absl::SleepFor(kGrace);
  EXPECT_FALSE(freed.load());
  EXPECT_OK(memory_->Lookup(session, held));
  // A new allocation meanwhile does not get the held block.
  const AllocationId fresh = Allocate(session, DeviceIndex(0), kBytes);
  std::string bytes;
  ASSERT_OK(work_->DeviceToHost(session, RangeUse{fresh, 0, kBytes}, WorkOptions{}, &bytes));
  EXPECT_EQ(bytes.find('h'), std::string::npos);

  EXPECT_OK(holder.Release());
  freer.join();
  EXPECT_TRUE(freed.load());
  EXPECT_THAT(memory_->Lookup(session, held), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(HoldAllocationsTest, TheSessionsEndWaitsForTheUseThenReturnsEverything) {
  const SessionId session = Open("holder");
  const AllocationId held = Allocate(session, DeviceIndex(1), kBytes);
  Holder holder(*memory_, *backend_, session, RangeUse{held, 4096, kBytes - 4096}, 'x');
  std::atomic<bool> closed{false};
  std::thread closer([&] {
    lifecycle_->Close(session, SessionEndReason::kClosed, "test over");
    closed = true;
  });
  absl::SleepFor(kGrace);
  EXPECT_FALSE(closed.load());
  EXPECT_THAT(holder.Release(),
              StatusIs(absl::StatusCode::kUnauthenticated));  // it ended meanwhile
  closer.join();
  absl::StatusOr<DeviceStats> stats = memory_->GetStats(DeviceIndex(1), std::nullopt);
  ASSERT_OK(stats);
  EXPECT_EQ(stats->allocated_bytes[kAggregate].current, 0);
}

TEST_F(HoldAllocationsTest, BadRangesAreRefusedAndTheUsesStatusComesBack) {
  const SessionId session = Open("holder");
  const SessionId stranger = Open("stranger");
  const AllocationId mine = Allocate(session, DeviceIndex(0), kBytes);
  auto never = [](absl::Span<const DeviceSpan>) {
    ADD_FAILURE() << "the use ran for a refused range";
    return absl::OkStatus();
  };
  const RangeUse past_the_end{mine, kBytes - 8, 9};
  EXPECT_THAT(memory_->HoldAllocations(session, absl::MakeConstSpan(&past_the_end, 1), never),
              StatusIs(absl::StatusCode::kOutOfRange));
  const RangeUse whole{mine, 0, kBytes};
  EXPECT_THAT(memory_->HoldAllocations(stranger, absl::MakeConstSpan(&whole, 1), never),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(memory_->HoldAllocations(SessionId(999999), absl::MakeConstSpan(&whole, 1), never),
              StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(memory_->HoldAllocations(session, absl::MakeConstSpan(&whole, 1),
                                       [](absl::Span<const DeviceSpan>) {
                                         return absl::DataLossError("the use failed");
                                       }),
              StatusIs(absl::StatusCode::kDataLoss));
  // Nothing stays held: the allocation frees at once.
  EXPECT_OK(memory_->Free(session, {mine}));
}

}  // namespace
}  // namespace gpumux
