// RendezvousStore (server/core/rendezvous_store.h): rounds that complete
// when every rank joined, a key-value space per round, and every bound.

#include "server/core/rendezvous_store.h"

#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::StatusIs;
using ::testing::HasSubstr;

constexpr absl::Duration kWait = absl::Seconds(10);

TEST(RendezvousStoreTest, ARoundCompletesWhenEveryRankJoined) {
  RendezvousStore store;
  std::vector<absl::StatusOr<RendezvousRound>> rounds(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back(
        [&, r] { rounds[r] = store.Join("g", 3, r, "host" + std::to_string(r) + ":1", kWait); });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    ASSERT_OK(rounds[r].status());
    EXPECT_EQ(rounds[r]->generation, 1u);
    ASSERT_EQ(rounds[r]->members.size(), 3u);
    for (int m = 0; m < 3; ++m) {
      EXPECT_EQ(rounds[r]->members[m].rank, m);
      EXPECT_EQ(rounds[r]->members[m].address, "host" + std::to_string(m) + ":1");
    }
  }
  // Its keys: Get waits for a Set.
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(50));
    EXPECT_OK(store.Set("g", 1, "k", "value"));
  });
  absl::StatusOr<std::string> value = store.Get("g", 1, "k", kWait);
  setter.join();
  ASSERT_OK(value.status());
  EXPECT_EQ(*value, "value");
  // The next round takes the group's next generation; the old keys go.
  std::thread second([&] { EXPECT_OK(store.Join("g", 2, 1, "b", kWait).status()); });
  absl::StatusOr<RendezvousRound> round = store.Join("g", 2, 0, "a", kWait);
  second.join();
  ASSERT_OK(round.status());
  EXPECT_EQ(round->generation, 2u);
  EXPECT_THAT(store.Get("g", 1, "k", kWait),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("round 1 of group \"g\" is not current: round 2 is")));
  EXPECT_THAT(store.Get("g", 2, "k", absl::Milliseconds(20)),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("key \"k\" was not set within 20ms")));
}

TEST(RendezvousStoreTest, AMissingRankTimesOutNamingItAndLeavesNoTrace) {
  RendezvousStore store;
  EXPECT_THAT(
      store.Join("g", 3, 1, "b", absl::Milliseconds(20)),
      StatusIs(absl::StatusCode::kDeadlineExceeded,
               HasSubstr("group \"g\": 1 of 3 ranks joined within 20ms; missing ranks 0, 2")));
  // The timed-out rank left: a round of another world size may begin.
  std::thread other([&] { EXPECT_OK(store.Join("g", 2, 1, "b", kWait).status()); });
  EXPECT_OK(store.Join("g", 2, 0, "a", kWait).status());
  other.join();
}

TEST(RendezvousStoreTest, RefusesBadInputs) {
  RendezvousStore store;
  EXPECT_THAT(store.Join("a/b", 1, 0, "", kWait),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("may hold only")));
  EXPECT_THAT(store.Join("g", 0, 0, "", kWait),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("world size is 1 to 1024")));
  EXPECT_THAT(store.Join("g", 2, 5, "", kWait),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 5 is out of range")));
  EXPECT_THAT(store.Join("g", 2, 0, std::string(300, 'a'), kWait),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at most 256 bytes")));
  // A round of another world size is forming.
  std::thread waiting([&] { (void)store.Join("g", 3, 0, "a", absl::Milliseconds(300)); });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_THAT(store.Join("g", 2, 1, "b", kWait),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("is forming with world size 3, not 2 (ranks 0 joined)")));
  waiting.join();
  EXPECT_THAT(store.Set("none", 1, "k", "v"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no completed round")));
  ASSERT_OK(store.Join("one", 1, 0, "", kWait).status());
  EXPECT_THAT(store.Set("one", 1, "", "v"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("1 to 256 bytes, not 0")));
  EXPECT_THAT(store.Set("one", 1, std::string(257, 'k'), "v"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not 257")));
  EXPECT_THAT(store.Set("one", 1, "k", std::string(RendezvousStore::kMaxValueBytes + 1, 'v')),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at most 1048576 bytes")));
  for (size_t i = 0; i < RendezvousStore::KeysPerRound(1); ++i) {
    ASSERT_OK(store.Set("one", 1, "k" + std::to_string(i), "v"));
  }
  EXPECT_THAT(store.Set("one", 1, "one more", "v"),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("its limit")));
  EXPECT_OK(store.Set("one", 1, "k0", "replaced"));  // replacing needs no room
}

TEST(RendezvousStoreTest, CloseEndsEveryWait) {
  RendezvousStore store;
  std::thread closer([&] {
    absl::SleepFor(absl::Milliseconds(50));
    store.Close();
  });
  EXPECT_THAT(store.Join("g", 2, 0, "a", kWait),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("shutting down")));
  closer.join();
  EXPECT_THAT(store.Get("g", 1, "k", kWait), StatusIs(absl::StatusCode::kUnavailable));
}

}  // namespace
}  // namespace gpumux
