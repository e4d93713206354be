#include "client/cli/text_table.h"

#include "gtest/gtest.h"

namespace gpumux {
namespace {

TEST(TextTableTest, PadsColumnsAndAlignsNumbersRight) {
  TextTable table({"ID", "NAME", "BYTES"});
  table.AlignRight(0);
  table.AlignRight(2);
  table.AddRow({"7", "trainer", "1024"});
  table.AddRow({"12", "x", "5"});
  EXPECT_EQ(table.Render(),
            "ID  NAME     BYTES\n"
            " 7  trainer   1024\n"
            "12  x            5\n");
}

TEST(TextTableTest, MissingCellsAreEmptyAndLinesHaveNoTrailingSpaces) {
  TextTable table({"A", "LONG"});
  table.AddRow({"x"});
  EXPECT_EQ(table.Render(), "A  LONG\nx\n");
}

}  // namespace
}  // namespace gpumux
