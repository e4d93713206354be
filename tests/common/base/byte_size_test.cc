#include "common/base/byte_size.h"

#include <cstdint>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::StatusIs;

struct ParseCase {
  const char* text;
  uint64_t bytes;
};

TEST(ByteSizeTest, ParsesUnitsDecimalsAndSpaces) {
  constexpr uint64_t kKi = 1024;
  const ParseCase cases[] = {
      {"0", 0},
      {"4096", 4096},
      {"18446744073709551615", UINT64_MAX},
      {"512B", 512},
      {"512 b", 512},
      {"1KiB", kKi},
      {"1kib", kKi},
      {"1 KIB", kKi},
      {"2MiB", 2 * kKi * kKi},
      {"8GiB", 8 * kKi * kKi * kKi},
      {"8 gib", 8 * kKi * kKi * kKi},
      {"3TiB", 3 * kKi * kKi * kKi * kKi},
      {"1KB", 1000},
      {"1kb", 1000},
      {"512 MB", 512'000'000},
      {"2GB", 2'000'000'000},
      {"4TB", 4'000'000'000'000},
      {"1.5GiB", 1'610'612'736},
      {"0.5 KiB", 512},
      {".5KiB", 512},
      {"2.25MB", 2'250'000},
      {"1.1TB", 1'100'000'000'000},
      {"0.1KB", 100},
      {"  7 MiB  ", 7 * kKi * kKi},
      {"\t16\n", 16},
      {"16777215TiB", 16777215 * kKi * kKi * kKi * kKi},
  };
  for (const ParseCase& c : cases) {
    absl::StatusOr<uint64_t> parsed = ParseByteSize(c.text);
    ASSERT_OK(parsed) << "'" << c.text << "'";
    EXPECT_EQ(*parsed, c.bytes) << "'" << c.text << "'";
  }
}

TEST(ByteSizeTest, RejectsMalformedInput) {
  for (const char* text : {"", " ", "KiB", "-1", "-1KiB", "+5", "1e3", "1.2.3", ".", "1 K", "1 k",
                           "1 KiBs", "1 K iB", "1 PiB", "0x10", "ten", "1,024", "1 2"}) {
    EXPECT_THAT(ParseByteSize(text), StatusIs(absl::StatusCode::kInvalidArgument))
        << "'" << text << "'";
  }
}

TEST(ByteSizeTest, RejectsValuesAbove64Bits) {
  for (const char* text :
       {"18446744073709551616", "99999999999999999999999", "16777216TiB", "18446744073709552KB",
        "17179869184GiB", "16777216.5TiB", "20000000TB"}) {
    EXPECT_THAT(ParseByteSize(text), StatusIs(absl::StatusCode::kInvalidArgument))
        << "'" << text << "'";
  }
}

struct FormatCase {
  uint64_t bytes;
  const char* text;
};

TEST(ByteSizeTest, FormatsLikeTorchFormatSize) {
  // c10's format_size: "<n> bytes" through 1024 inclusive, then two decimals
  // of KiB through 1 MiB, MiB through 1 GiB, GiB above.
  const FormatCase cases[] = {
      {0, "0 bytes"},
      {1, "1 bytes"},
      {1024, "1024 bytes"},
      {1025, "1.00 KiB"},
      {1536, "1.50 KiB"},
      {1048576, "1024.00 KiB"},
      {1048577, "1.00 MiB"},
      {20 * 1048576, "20.00 MiB"},
      {1073741824, "1024.00 MiB"},
      {1073741825, "1.00 GiB"},
      {uint64_t{79} * 1073741824 + 536870912, "79.50 GiB"},
      {uint64_t{4096} << 30, "4096.00 GiB"},
  };
  for (const FormatCase& c : cases) EXPECT_EQ(FormatTorchSize(c.bytes), c.text) << c.bytes;
}

}  // namespace
}  // namespace gpumux
