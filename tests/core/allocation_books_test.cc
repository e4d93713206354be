// AllocationBooks alone: ids are a session's own, an import is charged to
// its holder until the holder charged for the block drops it, a block lives
// until its last id goes, and ranges must fit what was asked for.

#include "server/core/allocation_books.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::IsOk;
using ::gpumux::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr SessionId kA(1);
constexpr SessionId kB(2);
constexpr SessionId kC(3);

// A block of `size` bytes (1000 asked for) at `address` of device 1.
AllocationView BlockAt(uint64_t address, uint64_t size = 2 * kMiB) {
  AllocationView view;
  view.device = DeviceIndex(1);
  view.requested_size = 1000;
  view.size = size;
  view.address = address;
  view.segment_id = SegmentId(5);
  view.segment_size = 20 * kMiB;
  return view;
}

class AllocationBooksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (SessionId session : {kA, kB, kC}) books_.AddSession(session);
  }

  AllocationBooks books_{2};
};

TEST_F(AllocationBooksTest, OneSessionsIdsAreInvisibleToAnother) {
  const AllocationView view = books_.AddBlock(kA, BlockAt(0x1000), false, false);
  EXPECT_NE(view.id, AllocationId(0));
  EXPECT_EQ(view.address, 0x1000u);
  absl::StatusOr<AllocationView> found = books_.Lookup(kA, view.id);
  ASSERT_THAT(found, IsOk());
  EXPECT_EQ(found->id, view.id);
  EXPECT_EQ(found->size, 2 * kMiB);
  const std::string not_found = absl::StrCat(
      "allocation ", view.id.value(), " not found: it is not a live allocation of this session");
  EXPECT_THAT(books_.Lookup(kB, view.id), StatusIs(absl::StatusCode::kNotFound, not_found));
  EXPECT_THAT(books_.Find(kB, view.id), StatusIs(absl::StatusCode::kNotFound, not_found));
  EXPECT_THAT(books_.FindRange(kB, {.id = view.id}),
              StatusIs(absl::StatusCode::kNotFound, not_found));
  EXPECT_THAT(books_.Find(kA, AllocationId(view.id.value() + 1)),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(books_.SessionIds(kA), ElementsAre(view.id));
  EXPECT_THAT(books_.SessionIds(kB), IsEmpty());
}

TEST_F(AllocationBooksTest, ABlockGoesWithItsLastIdAndIdsAreNotReused) {
  const AllocationView first = books_.AddBlock(kA, BlockAt(0x1000), false, false);
  const AllocationBooks::Dropped dropped = books_.DropReference(first.id);
  EXPECT_TRUE(dropped.last);
  EXPECT_FALSE(dropped.imported);
  EXPECT_FALSE(dropped.heir.has_value());
  EXPECT_EQ(dropped.device, DeviceIndex(1));
  EXPECT_EQ(dropped.address, 0x1000u);
  EXPECT_EQ(dropped.size, 2 * kMiB);
  EXPECT_THAT(books_.Lookup(kA, first.id), StatusIs(absl::StatusCode::kNotFound));
  // The same memory, booked again, is another block under another id.
  const AllocationView second = books_.AddBlock(kA, BlockAt(0x1000), false, false);
  EXPECT_NE(second.id, first.id);
  EXPECT_NE(books_.Find(kA, second.id).value()->id, dropped.block);
}

TEST_F(AllocationBooksTest, AnImportIsChargedToItsHolderUntilTheChargedOneLeaves) {
  const AllocationView shared = books_.AddBlock(kA, BlockAt(0x1000), true, false);
  const BlockId block = books_.Find(kA, shared.id).value()->id;
  const AllocationView b = books_.AddImport(kB, block);
  const AllocationView c = books_.AddImport(kC, block);
  EXPECT_EQ(b.address, shared.address);
  EXPECT_NE(b.id, shared.id);
  EXPECT_EQ(books_.ImportedBytes(kB), (std::vector<uint64_t>{0, 2 * kMiB}));
  EXPECT_EQ(books_.ImportedBytes(kA), (std::vector<uint64_t>{0, 0}));

  // The charged holder leaves: the oldest remaining holder takes it over.
  AllocationBooks::Dropped dropped = books_.DropReference(shared.id);
  EXPECT_FALSE(dropped.last);
  EXPECT_EQ(dropped.heir, kB);
  EXPECT_EQ(dropped.segment_size, 20 * kMiB);
  EXPECT_EQ(books_.Find(kB, b.id).value()->charged, kB);
  EXPECT_EQ(books_.ImportedBytes(kB), (std::vector<uint64_t>{0, 0}));
  EXPECT_EQ(books_.ImportedBytes(kC), (std::vector<uint64_t>{0, 2 * kMiB}));

  // A holder not charged leaves: nothing changes hands.
  dropped = books_.DropReference(c.id);
  EXPECT_TRUE(dropped.imported);
  EXPECT_FALSE(dropped.last);
  EXPECT_FALSE(dropped.heir.has_value());
  EXPECT_EQ(books_.ImportedBytes(kC), (std::vector<uint64_t>{0, 0}));

  // The heir leaves last, as the holder of the block, not an importer.
  dropped = books_.DropReference(b.id);
  EXPECT_TRUE(dropped.last);
  EXPECT_FALSE(dropped.imported);
  EXPECT_EQ(dropped.block, block);
  EXPECT_EQ(books_.ImportedBytes(kB), (std::vector<uint64_t>{0, 0}));
}

TEST_F(AllocationBooksTest, LeasesAreCountedPerDeviceUntilFreed) {
  const AllocationView lease = books_.AddBlock(kA, BlockAt(0x1000), false, /*leased=*/true);
  books_.AddBlock(kB, BlockAt(0x9000), false, /*leased=*/false);
  EXPECT_THAT(books_.SessionsWithLeases(DeviceIndex(1)), UnorderedElementsAre(kA));
  EXPECT_THAT(books_.SessionsWithLeases(DeviceIndex(0)), IsEmpty());
  books_.DropReference(lease.id);
  EXPECT_THAT(books_.SessionsWithLeases(DeviceIndex(1)), IsEmpty());
}

TEST_F(AllocationBooksTest, ARangeMustFitTheRequestedSize) {
  const AllocationView view = books_.AddBlock(kA, BlockAt(0x1000), false, false);
  EXPECT_THAT(books_.FindRange(kA, {.id = view.id, .offset = 0, .size = 1000}), IsOk());
  EXPECT_THAT(books_.FindRange(kA, {.id = view.id, .offset = 1000, .size = 0}), IsOk());
  EXPECT_THAT(books_.FindRange(kA, {.id = view.id, .offset = 10, .size = 991}),
              StatusIs(absl::StatusCode::kOutOfRange,
                       absl::StrCat("bytes [10, 10 + 991) are outside allocation ", view.id.value(),
                                    " of 1000 bytes")));
  EXPECT_THAT(books_.FindRange(kA, {.id = view.id, .offset = 1001, .size = 0}),
              StatusIs(absl::StatusCode::kOutOfRange));
  // offset + size would wrap around.
  EXPECT_THAT(books_.FindRange(
                  kA, {.id = view.id, .offset = 1, .size = std::numeric_limits<uint64_t>::max()}),
              StatusIs(absl::StatusCode::kOutOfRange));
}

TEST_F(AllocationBooksTest, HeldBlocksAreToldApart) {
  const AllocationView held = books_.AddBlock(kA, BlockAt(0x1000), false, false);
  const AllocationView free = books_.AddBlock(kA, BlockAt(0x9000), false, false);
  absl::StatusOr<AllocationBooks::Block*> block = books_.FindRange(kA, {.id = held.id});
  ASSERT_THAT(block, IsOk());
  ++(*block)->holds;
  EXPECT_FALSE(books_.NoneHeld({free.id, held.id}));
  EXPECT_TRUE(books_.NoneHeld({free.id, AllocationId(999)}));  // not live: not held
  --(*block)->holds;
  EXPECT_TRUE(books_.NoneHeld({free.id, held.id}));
}

TEST_F(AllocationBooksTest, ASessionsIdsComeInOrderAndItsBooksClose) {
  std::vector<AllocationId> ids;
  for (uint64_t i = 0; i < 3; ++i) {
    ids.push_back(books_.AddBlock(kA, BlockAt(0x1000 * (i + 1)), false, false).id);
  }
  books_.AddBlock(kB, BlockAt(0x9000), false, false);
  EXPECT_THAT(books_.SessionIds(kA), ElementsAre(ids[0], ids[1], ids[2]));
  for (AllocationId id : books_.SessionIds(kA)) books_.DropReference(id);
  books_.RemoveSession(kA);
  EXPECT_FALSE(books_.HasSession(kA));
  EXPECT_TRUE(books_.HasSession(kB));
  EXPECT_THAT(books_.SessionIds(kA), IsEmpty());
  EXPECT_THAT(books_.ImportedBytes(kA), IsEmpty());
}

}  // namespace
}  // namespace gpumux
