// EmulatedAddressSpace: first fit in address order at 2 MiB alignment, the
// lowest free address reused first, neighbours merged on the way back.

#include "common/segments/emulated_address_space.h"

#include "gtest/gtest.h"

namespace gpumux {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kBase = uint64_t{1} << 40;

TEST(EmulatedAddressSpaceTest, HandsOutAlignedRangesLowestFirst) {
  EmulatedAddressSpace space(kBase, 64 * kMiB);
  EXPECT_EQ(space.Take(512), kBase);
  EXPECT_EQ(space.Take(3 * kMiB), kBase + 2 * kMiB);  // rounded up to 4 MiB
  EXPECT_EQ(space.Take(2 * kMiB), kBase + 6 * kMiB);
  space.Give(kBase, 512);
  EXPECT_EQ(space.Take(kMiB), kBase);  // the lowest free address again
}

TEST(EmulatedAddressSpaceTest, MergesNeighboursSoLargeRangesFitAgain) {
  EmulatedAddressSpace space(kBase, 8 * kMiB);
  const std::optional<uint64_t> a = space.Take(2 * kMiB);
  const std::optional<uint64_t> b = space.Take(2 * kMiB);
  const std::optional<uint64_t> c = space.Take(2 * kMiB);
  const std::optional<uint64_t> d = space.Take(2 * kMiB);
  ASSERT_TRUE(a && b && c && d);
  EXPECT_EQ(space.Take(2 * kMiB), std::nullopt);
  space.Give(*b, 2 * kMiB);
  space.Give(*d, 2 * kMiB);
  EXPECT_EQ(space.Take(4 * kMiB), std::nullopt);  // 2 + 2, not contiguous
  space.Give(*c, 2 * kMiB);                       // b, c and d merge
  EXPECT_EQ(space.Take(6 * kMiB), *b);
  space.Give(*a, 2 * kMiB);
  EXPECT_EQ(space.Take(2 * kMiB), *a);
}

TEST(EmulatedAddressSpaceTest, AnEmptySpaceHasNothing) {
  EmulatedAddressSpace space;
  EXPECT_EQ(space.Take(512), std::nullopt);
}

}  // namespace
}  // namespace gpumux
