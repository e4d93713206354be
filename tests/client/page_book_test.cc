// PageBook: which pages an unmap notice takes, when replies that remapped an
// offset may arrive before the notices about the pages they replaced.

#include "client/page_book.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpumux {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;

constexpr uint64_t kPage = uint64_t{2} << 20;

TEST(PageBookTest, ANoticeUnmapsThePagesMappedInItsRange) {
  PageBook book;
  book.Mapped(0, "a", kPage);
  book.Mapped(kPage, "b", kPage);
  book.Mapped(3 * kPage, "c", kPage);
  EXPECT_THAT(book.Unmapped(kPage, 3 * kPage),
              ElementsAre(Pair(kPage, kPage), Pair(3 * kPage, kPage)));
  EXPECT_EQ(*book.KeyAt(0), "a");
  EXPECT_EQ(book.KeyAt(kPage), nullptr);
  EXPECT_THAT(book.Unmapped(kPage, kPage), IsEmpty());  // nothing mapped there now
  EXPECT_THAT(book.All(), ElementsAre(Pair(0, kPage)));
}

TEST(PageBookTest, ALateNoticeSparesThePageThatReplacedTheOneItIsAbout) {
  PageBook book;
  book.Mapped(kPage, "old", kPage);
  // The daemon unmapped "old" (notice on its way) and mapped "new" there;
  // the reply bringing "new" comes first.
  book.Mapped(kPage, "new", kPage);
  EXPECT_THAT(book.Unmapped(0, 4 * kPage), IsEmpty());
  EXPECT_EQ(*book.KeyAt(kPage), "new");
  // The next notice is about "new" itself.
  EXPECT_THAT(book.Unmapped(kPage, kPage), ElementsAre(Pair(kPage, kPage)));
  EXPECT_EQ(book.KeyAt(kPage), nullptr);
}

TEST(PageBookTest, TwoReplacementsOweTwoNotices) {
  PageBook book;
  book.Mapped(0, "k1", kPage);
  book.Mapped(0, "k2", kPage);
  book.Mapped(0, "k3", kPage);
  book.Mapped(0, "k3", kPage);  // the same page again: nothing replaced
  EXPECT_THAT(book.Unmapped(0, kPage), IsEmpty());
  EXPECT_THAT(book.Unmapped(0, kPage), IsEmpty());
  EXPECT_EQ(*book.KeyAt(0), "k3");
  EXPECT_THAT(book.Unmapped(0, kPage), ElementsAre(Pair(0, kPage)));
}

TEST(PageBookTest, ANoticeInTimeLeavesNothingOwed) {
  PageBook book;
  book.Mapped(0, "old", kPage);
  EXPECT_THAT(book.Unmapped(0, kPage), ElementsAre(Pair(0, kPage)));
  book.Mapped(0, "new", kPage);  // after the notice: replaces nothing
  EXPECT_THAT(book.Unmapped(0, kPage), ElementsAre(Pair(0, kPage)));
}

}  // namespace
}  // namespace gpumux
