// MemoryManager alone, wired as the daemon wires it over a host backend
// (tests/core/core_fixture.h): one session's ids are invisible to another,
// share tokens are single-use and an import outlives its exporter, limits
// refuse what they should with PyTorch's messages, and free requests are
// bounded.

#include "server/core/memory_manager.h"

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/core_fixture.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::IsOk;
using ::gpumux::testing::StatusIs;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr DeviceIndex kDevice(0);

class MemoryManagerTest : public testing::CoreTest {};

TEST_F(MemoryManagerTest, OneSessionsIdsAreInvisibleToAnother) {
  const SessionId a = Open("a");
  const SessionId b = Open("b");
  const AllocationId id = Allocate(a, kDevice, kMiB);
  EXPECT_THAT(memory_->Lookup(a, id), IsOk());
  EXPECT_THAT(memory_->Lookup(b, id), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(memory_->Free(b, {id}), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(memory_->Share(b, id), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(memory_->Free(a, {id}), IsOk());
  EXPECT_THAT(memory_->Lookup(a, id), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(MemoryManagerTest, AShareTokenIsUsedOnceAndAnImportOutlivesItsExporter) {
  const SessionId a = Open("a");
  const SessionId b = Open("b");
  const SessionId c = Open("c");
  EXPECT_THAT(memory_->Share(a, Allocate(a, kDevice, kMiB)),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  absl::StatusOr<AllocationView> shared =
      memory_->Allocate(a, kDevice, StreamId(0), 3 * kMiB, /*shareable=*/true);
  ASSERT_THAT(shared, IsOk());
  absl::StatusOr<std::string> token = memory_->Share(a, shared->id);
  ASSERT_THAT(token, IsOk());
  EXPECT_THAT(memory_->Import(c, "not a token"), StatusIs(absl::StatusCode::kInvalidArgument));
  absl::StatusOr<AllocationView> imported = memory_->Import(b, *token);
  ASSERT_THAT(imported, IsOk());
  EXPECT_EQ(imported->address, shared->address);
  EXPECT_EQ(imported->requested_size, 3 * kMiB);
  EXPECT_THAT(memory_->Import(c, *token), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(memory_->share_counts().issued, 1u);

  lifecycle_->Close(a, SessionEndReason::kClosed, "exporter done");
  absl::StatusOr<AllocationView> kept = memory_->Lookup(b, imported->id);
  ASSERT_THAT(kept, IsOk());
  EXPECT_EQ(kept->address, shared->address);
  // Charged to the importer now.
  absl::StatusOr<DeviceStats> stats = memory_->GetStats(kDevice, b);
  ASSERT_THAT(stats, IsOk());
  EXPECT_EQ(stats->allocated_bytes[kAggregate].current, static_cast<int64_t>(imported->size));
  EXPECT_THAT(memory_->Free(b, {imported->id}), IsOk());
}

TEST_F(MemoryManagerTest, ALimitRefusesWhatWouldPassIt) {
  const SessionId a = Open("a");
  EXPECT_THAT(
      memory_->SetMemoryLimit(a, kDevice, {.kind = MemoryLimit::Kind::kFraction, .fraction = 1.5}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("Invalid fraction value")));
  absl::StatusOr<uint64_t> limit =
      memory_->SetMemoryLimit(a, kDevice, {.kind = MemoryLimit::Kind::kFraction, .fraction = 0.25});
  ASSERT_THAT(limit, IsOk());
  EXPECT_EQ(*limit, 4 * kMiB);
  // Blocks of 1 MiB, two to a 2 MiB small-pool segment: four fit in the
  // limit, a fifth would take a third segment.
  for (int i = 0; i < 4; ++i) {
    EXPECT_THAT(memory_->Allocate(a, kDevice, StreamId(0), kMiB, false), IsOk());
  }
  EXPECT_THAT(memory_->Allocate(a, kDevice, StreamId(0), kMiB, false),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("of its 4.00 MiB limit")));
  // Another session is not limited by it.
  const SessionId b = Open("b");
  for (int i = 0; i < 5; ++i) {
    EXPECT_THAT(memory_->Allocate(b, kDevice, StreamId(0), kMiB, false), IsOk());
  }
}

TEST_F(MemoryManagerTest, AFreeRequestIsBounded) {
  const SessionId a = Open("a");
  const AllocationId id = Allocate(a, kDevice, kMiB);
  std::vector<AllocationId> many(MemoryManager::kMaxFreeIds + 1, id);
  EXPECT_THAT(memory_->Free(a, many), StatusIs(absl::StatusCode::kInvalidArgument));
  // Nothing was freed.
  EXPECT_THAT(memory_->Lookup(a, id), IsOk());
  EXPECT_THAT(memory_->Free(a, {id, id}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(memory_->Lookup(a, id), IsOk());
}

}  // namespace
}  // namespace gpumux
