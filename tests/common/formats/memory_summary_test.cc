#include "common/formats/memory_summary.h"

#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpumux {
namespace {

constexpr int64_t kKiB = int64_t{1} << 10;
constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::vector<std::string> Lines(absl::string_view text) { return absl::StrSplit(text, '\n'); }

// Stats whose summary is testdata/torch_memory_summary_example.txt: each value
// is the printed number in the printed unit, plus a remainder below one unit
// where that keeps current = allocated - freed. Every column's unit is chosen
// by the "all" row, as in PyTorch, so the pool rows follow it.
DeviceStats ExampleStats() {
  DeviceStats s;
  auto set = [](Stat& stat, int64_t current, int64_t peak, int64_t allocated, int64_t freed) {
    stat = Stat{.current = current, .peak = peak, .allocated = allocated, .freed = freed};
  };
  for (StatArray* bytes : {&s.allocated_bytes, &s.active_bytes}) {
    set((*bytes)[kAggregate], 123908 * kKiB, 4397 * kMiB, 935 * kGiB + 123908 * kKiB, 935 * kGiB);
    set((*bytes)[kLargePool], 121856 * kKiB, 4394 * kMiB, 929 * kGiB + 121856 * kKiB, 929 * kGiB);
    set((*bytes)[kSmallPool], 2052 * kKiB, 22 * kMiB, 6 * kGiB + 2052 * kKiB, 6 * kGiB);
  }
  set(s.requested_bytes[kAggregate], 123908 * kKiB, 4381 * kMiB, 934 * kGiB + 123908 * kKiB,
      934 * kGiB);
  set(s.requested_bytes[kLargePool], 121856 * kKiB, 4378 * kMiB, 928 * kGiB + 121856 * kKiB,
      928 * kGiB);
  set(s.requested_bytes[kSmallPool], 2052 * kKiB, 22 * kMiB, 6 * kGiB + 2052 * kKiB, 6 * kGiB);
  set(s.reserved_bytes[kAggregate], 131072 * kKiB, 10474 * kMiB, 30686 * kMiB, 30558 * kMiB);
  set(s.reserved_bytes[kLargePool], 126976 * kKiB, 10442 * kMiB, 30618 * kMiB, 30494 * kMiB);
  set(s.reserved_bytes[kSmallPool], 4096 * kKiB, 32 * kMiB, 68 * kMiB, 64 * kMiB);
  set(s.inactive_split_bytes[kAggregate], 7163 * kKiB, 5542 * kMiB, 663987 * kMiB,
      663987 * kMiB - 7163 * kKiB);
  set(s.inactive_split_bytes[kLargePool], 5120 * kKiB, 5537 * kMiB, 657363 * kMiB, 657358 * kMiB);
  set(s.inactive_split_bytes[kSmallPool], 2043 * kKiB, 9 * kMiB, 6623 * kMiB,
      6623 * kMiB - 2043 * kKiB);
  for (StatArray* counts : {&s.allocation, &s.active}) {
    set((*counts)[kAggregate], 9, 729, 64282, 64273);
    set((*counts)[kLargePool], 5, 285, 33613, 33608);
    set((*counts)[kSmallPool], 4, 477, 30669, 30665);
  }
  set(s.segment[kAggregate], 6, 77, 257, 251);
  set(s.segment[kLargePool], 4, 61, 223, 219);
  set(s.segment[kSmallPool], 2, 16, 34, 32);
  set(s.inactive_split[kAggregate], 4, 107, 26542, 26538);
  set(s.inactive_split[kLargePool], 1, 68, 17356, 17355);
  set(s.inactive_split[kSmallPool], 3, 41, 9186, 9183);
  return s;
}

class MemorySummaryExampleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string example =
        ReadFile(GPUMUX_SOURCE_DIR "/testdata/torch_memory_summary_example.txt");
    std::vector<std::string> parts =
        absl::StrSplit(example, absl::ByString("\n\n=== abbreviated ===\n"));
    ASSERT_EQ(parts.size(), 2u) << "unexpected layout of the example file";
    full_ = parts[0];
    abbreviated_ = parts[1];
  }

  std::string full_;
  std::string abbreviated_;
};

TEST_F(MemorySummaryExampleTest, FullTableMatchesTorchLineForLine) {
  const std::string summary = FormatMemorySummary(ExampleStats(), 0, /*abbreviated=*/false);
  EXPECT_THAT(Lines(summary), ::testing::ElementsAreArray(Lines(full_)));
  EXPECT_EQ(summary, full_);
}

TEST_F(MemorySummaryExampleTest, AbbreviatedTableMatchesTorchLineForLine) {
  const std::string summary = FormatMemorySummary(ExampleStats(), 0, /*abbreviated=*/true);
  EXPECT_THAT(Lines(summary), ::testing::ElementsAreArray(Lines(abbreviated_)));
  EXPECT_EQ(summary, abbreviated_);
}

TEST_F(MemorySummaryExampleTest, FlatMapGivesTheSameTable) {
  std::map<std::string, int64_t> flat;
  for (const auto& [key, value] : FlattenMemoryStats(ExampleStats())) flat[key] = value;
  EXPECT_EQ(FormatMemorySummary(flat, 0, false), full_);
}

// The line of `summary` whose label is `metric` (pool = 0), or its large
// (pool = 1) or small (pool = 2) pool line below it.
std::string Row(const std::string& summary, absl::string_view metric, size_t pool = 0) {
  const std::vector<std::string> lines = Lines(summary);
  for (size_t i = 0; i + pool < lines.size(); ++i) {
    if (absl::StartsWith(lines[i], absl::StrCat("| ", metric, " "))) return lines[i + pool];
  }
  return "";
}

TEST(MemorySummaryTest, HeaderShowsDeviceOomsAndRetries) {
  DeviceStats stats;
  stats.num_ooms = 12;
  stats.num_alloc_retries = 345;
  const std::vector<std::string> lines = Lines(FormatMemorySummary(stats, 3, true));
  ASSERT_GE(lines.size(), 4u);
  EXPECT_EQ(lines[1],
            "|                  PyTorch CUDA memory summary, device ID 3                 |");
  EXPECT_EQ(lines[3],
            "|            CUDA OOMs: 12           |        cudaMalloc retries: 345       |");
}

TEST(MemorySummaryTest, SizeUnitSwitchesAt768OfTheAllRow) {
  DeviceStats stats;
  stats.allocated_bytes[kAggregate] = Stat{
      .current = 768 * kKiB - 1, .peak = 768 * kKiB, .allocated = 768 * kMiB, .freed = 768 * kGiB};
  stats.allocated_bytes[kLargePool] =
      Stat{.current = 5000, .peak = 5000, .allocated = 5 * kMiB, .freed = 100};
  stats.allocated_bytes[kSmallPool] =
      Stat{.current = -1, .peak = 0, .allocated = 768 * kMiB - 1, .freed = 0};
  const std::string summary = FormatMemorySummary(stats, 0, false);
  EXPECT_EQ(Row(summary, "Allocated memory"),
            "| Allocated memory      | 786431 B   |    768 KiB |    768 MiB |    768 GiB |");
  // Pool rows take the unit of the "all" row and floor like Python's //.
  EXPECT_EQ(Row(summary, "Allocated memory", 1),
            "|       from large pool |   5000 B   |      4 KiB |      5 MiB |      0 GiB |");
  EXPECT_EQ(Row(summary, "Allocated memory", 2),
            "|       from small pool |     -1 B   |      0 KiB |    767 MiB |      0 GiB |");
}

TEST(MemorySummaryTest, CountUnitSwitchesAt750kOfTheAllRow) {
  DeviceStats stats;
  stats.allocation[kAggregate] =
      Stat{.current = 749999, .peak = 750000, .allocated = 750000000, .freed = 1};
  stats.allocation[kLargePool] = Stat{.current = 1, .peak = 1999, .allocated = 1000, .freed = 1};
  stats.oversize_segments = Stat{.current = 1, .peak = 750000, .allocated = 2, .freed = 1};
  const std::string summary = FormatMemorySummary(stats, 0, false);
  EXPECT_EQ(Row(summary, "Allocations"),
            "| Allocations           |  749999    |     750 K  |     750 M  |       1    |");
  EXPECT_EQ(Row(summary, "Allocations", 1),
            "|       from large pool |       1    |       1 K  |       0 M  |       1    |");
  EXPECT_EQ(Row(summary, "Oversize GPU segments"),
            "| Oversize GPU segments |       1    |     750 K  |       2    |       1    |");
}

}  // namespace
}  // namespace gpumux
