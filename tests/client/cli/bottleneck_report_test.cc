// `gpumux bottleneck`'s report on synthetic profiles: the pstats and autograd
// table layouts, the verdict's 5% rule, NVTX attribution, the caveats, and
// that the JSON and the Chrome trace parse and hang together.

#include "client/cli/bottleneck_report.h"

#include <cctype>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpumux {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// ---- A small JSON reader: strict RFC 8259 syntax, values kept as a tree ----

struct Json {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<Json> array;
  // An object's members in order: names[i] is values[i]'s. (Two vectors,
  // as a std::pair cannot hold the incomplete Json.)
  std::vector<std::string> names;
  std::vector<Json> values;

  // The member's value; nullptr when absent or not an object.
  const Json* Find(const std::string& key) const {
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == key) return &values[i];
    }
    return nullptr;
  }
  std::vector<std::string> Keys() const { return names; }
};

class JsonReader {
 public:
  // The value when `text` is exactly one JSON value (whitespace around it).
  static std::optional<Json> Read(const std::string& text) {
    JsonReader reader(text);
    Json value;
    reader.SkipSpace();
    if (!reader.Value(value, 0)) return std::nullopt;
    reader.SkipSpace();
    if (reader.pos_ != text.size()) return std::nullopt;
    return value;
  }

 private:
  explicit JsonReader(const std::string& text) : text_(text) {}

  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }
  void SkipSpace() {
    while (!AtEnd() && (Peek() == ' ' || Peek() == '\n' || Peek() == '\t' || Peek() == '\r')) {
      ++pos_;
    }
  }
  bool Consume(char c) {
    if (Peek() != c) return false;
    ++pos_;
    return true;
  }
  bool Literal(const std::string& word) {
    if (text_.compare(pos_, word.size(), word) != 0) return false;
    pos_ += word.size();
    return true;
  }
  size_t Digits() {
    size_t n = 0;
    while (std::isdigit(static_cast<unsigned char>(Peek()))) ++pos_, ++n;
    return n;
  }

  bool Value(Json& out, int depth) {
    if (depth > 64) return false;
    const char c = Peek();
    if (c == '{') return Object(out, depth);
    if (c == '[') return Array(out, depth);
    if (c == '"') {
      out.type = Json::Type::kString;
      return String(out.string);
    }
    if (c == 't' || c == 'f') {
      out.type = Json::Type::kBool;
      out.boolean = c == 't';
      return Literal(c == 't' ? "true" : "false");
    }
    if (c == 'n') return Literal("null");
    return Number(out);
  }

  bool Number(Json& out) {
    const size_t start = pos_;
    Consume('-');
    if (!Consume('0') && Digits() == 0) return false;
    if (Consume('.') && Digits() == 0) return false;
    if (Consume('e') || Consume('E')) {
      if (!Consume('+')) Consume('-');
      if (Digits() == 0) return false;
    }
    out.type = Json::Type::kNumber;
    out.number = std::stod(text_.substr(start, pos_ - start));
    return true;
  }

  bool String(std::string& out) {
    if (!Consume('"')) return false;
    while (!AtEnd()) {
      const char c = text_[pos_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      const char e = Peek();
      ++pos_;
      static const std::string kSimple = "\"\\/bfnrt";
      static const std::string kMeaning = "\"\\/\b\f\n\r\t";
      if (size_t i = kSimple.find(e); i != std::string::npos && e != '\0') {
        out.push_back(kMeaning[i]);
      } else if (e == 'u') {
        for (int digit = 0; digit < 4; ++digit) {
          if (!std::isxdigit(static_cast<unsigned char>(Peek()))) return false;
          ++pos_;
        }
        out.push_back('?');
      } else {
        return false;
      }
    }
    return false;
  }

  bool Array(Json& out, int depth) {
    out.type = Json::Type::kArray;
    Consume('[');
    SkipSpace();
    if (Consume(']')) return true;
    do {
      SkipSpace();
      out.array.emplace_back();
      if (!Value(out.array.back(), depth + 1)) return false;
      SkipSpace();
    } while (Consume(','));
    return Consume(']');
  }

  bool Object(Json& out, int depth) {
    out.type = Json::Type::kObject;
    Consume('{');
    SkipSpace();
    if (Consume('}')) return true;
    do {
      SkipSpace();
      std::string key;
      if (!String(key)) return false;
      SkipSpace();
      if (!Consume(':')) return false;
      SkipSpace();
      out.names.push_back(std::move(key));
      if (!Value(out.values.emplace_back(), depth + 1)) return false;
      SkipSpace();
    } while (Consume(','));
    return Consume('}');
  }

  const std::string& text_;
  size_t pos_ = 0;
};

TEST(JsonReaderTest, AcceptsJsonAndRejectsWhatIsNot) {
  EXPECT_TRUE(JsonReader::Read(R"({"a": [1, -2.5e3, "x\"\u00e9", true, null], "b": {}})"));
  EXPECT_FALSE(JsonReader::Read(R"({"a": 1,})"));
  EXPECT_FALSE(JsonReader::Read(R"({"a": 1} {)"));
  EXPECT_FALSE(JsonReader::Read(R"(["a" "b"])"));
  EXPECT_FALSE(JsonReader::Read(R"({"a": 01})"));
  EXPECT_FALSE(JsonReader::Read(R"({"a": nan})"));
  EXPECT_FALSE(JsonReader::Read("[\"tab\there\"]"));
}

// ---- Profiles ----

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kUs = 1'000;

HostFunction Function(std::string name, uint64_t calls, int64_t self_ns, int64_t total_ns) {
  HostFunction function;
  function.name = std::move(name);
  function.calls = calls;
  function.self_ns = self_ns;
  function.total_ns = total_ns;
  return function;
}

DeviceWorkRecord Work(std::string name, uint64_t session, int64_t host_start_ns, int64_t host_ns,
                      int64_t device_start_ns, int64_t device_ns) {
  DeviceWorkRecord record;
  record.name = std::move(name);
  record.session = session;
  record.host_start_ns = host_start_ns;
  record.host_end_ns = host_start_ns + host_ns;
  if (device_start_ns >= 0) {
    record.device_start_ns = device_start_ns;
    record.device_end_ns = device_start_ns + device_ns;
  }
  return record;
}

Profile BaseProfile() {
  Profile profile;
  profile.environment.gpumux_version = "0.1.0 (commit abc1234)";
  profile.environment.daemon_version = "0.1.0";
  profile.environment.build_type = "RelWithDebInfo";
  profile.environment.compiler = "GCC 12.2.0";
  profile.environment.os = "Debian GNU/Linux 12 (bookworm), Linux 6.1.0";
  profile.environment.backend = "cuda";
  profile.environment.devices = {"0: NVIDIA H200, 139.8 GiB, driver 580.x, runtime 13.0"};
  profile.program = "./train --epochs 1";
  profile.exit = "exited with status 0";
  profile.wall_ns = 1'234'567'890;
  profile.host.threads = 2;
  profile.host.start_ns = 1'000'000;
  profile.host.end_ns = profile.host.start_ns + profile.wall_ns;
  profile.host.library_ns = 300 * kMs;
  profile.host.waiting_ns = 999;
  return profile;
}

// The lines of `text` from the one starting with `first` up to, not
// including, the next empty line.
std::vector<std::string> Block(const std::string& text, const std::string& first) {
  std::istringstream lines(text);
  std::string line;
  std::vector<std::string> block;
  bool in = false;
  while (std::getline(lines, line)) {
    if (!in && line.rfind(first, 0) == 0) in = true;
    if (!in) continue;
    if (line.empty()) break;
    block.push_back(line);
  }
  return block;
}

// ---- Text: layout and sections ----

TEST(BottleneckTextTest, DescribesItselfThenFramesEverySectionInOrder) {
  const std::string text = FormatBottleneckText(BaseProfile(), ReportOptions());
  EXPECT_THAT(text, StartsWith("`gpumux bottleneck` is a tool that can be used as an initial step "
                               "for debugging bottlenecks in your program. It summarizes"));
  const std::string rule(80, '-');
  size_t last = 0;
  for (const char* title :
       {"Environment Summary", "Program", "Host view (libgpumux calls)",
        "Device view (work the daemon ran)", "NVTX ranges", "Verdict", "Caveats"}) {
    const size_t at = text.find(rule + "\n  " + title + "\n" + rule + "\n", last);
    ASSERT_NE(at, std::string::npos) << title;
    last = at + 1;
  }
}

TEST(BottleneckTextTest, SummarizesTheEnvironment) {
  Profile profile = BaseProfile();
  const std::string text = FormatBottleneckText(profile, ReportOptions());
  EXPECT_THAT(text, HasSubstr("  Environment Summary\n" + std::string(80, '-') +
                              "\n"
                              "gpumux 0.1.0 (commit abc1234) RelWithDebInfo, GCC 12.2.0\n"
                              "gpumuxd 0.1.0, backend cuda\n"
                              "Devices:\n"
                              "  0: NVIDIA H200, 139.8 GiB, driver 580.x, runtime 13.0\n"
                              "OS: Debian GNU/Linux 12 (bookworm), Linux 6.1.0\n"));
  profile.environment.devices.clear();
  EXPECT_THAT(FormatBottleneckText(profile, ReportOptions()), HasSubstr("Devices:\n  none\nOS: "));
}

TEST(BottleneckTextTest, ProgramLineUsesTheAutogradTimeFormat) {
  Profile profile = BaseProfile();
  EXPECT_THAT(FormatBottleneckText(profile, ReportOptions()),
              HasSubstr("./train --epochs 1: exited with status 0\n"
                        "wall time 1.235s, in libgpumux 300.000ms (24.30%) on 2 thread(s), of "
                        "which waiting for the device 0.999us\n"));

  // The unit switches at 1e3 and 1e6 microseconds, as _format_time's does.
  profile.program = "session 7";
  profile.exit = "";
  profile.wall_ns = 1'000'000'000;
  profile.host.library_ns = 999'999;
  profile.host.waiting_ns = 1'000'000;
  EXPECT_THAT(FormatBottleneckText(profile, ReportOptions()),
              HasSubstr("\nsession 7\n"
                        "wall time 1.000s, in libgpumux 999.999us (0.10%) on 2 thread(s), of "
                        "which waiting for the device 1.000ms\n"));
  profile.wall_ns = 999'999'999;
  profile.host.library_ns = 0;
  EXPECT_THAT(FormatBottleneckText(profile, ReportOptions()),
              HasSubstr("wall time 1000.000ms, in libgpumux 0.000us (0.00%)"));
  profile.wall_ns = 0;
  EXPECT_THAT(FormatBottleneckText(profile, ReportOptions()),
              HasSubstr("wall time 0.000us, in libgpumux 0.000us (NaN)"));
}

// ---- Host view: pstats ----

TEST(BottleneckHostViewTest, PrintsPstatsLayoutSortedByInternalTime) {
  Profile profile = BaseProfile();
  profile.host.library_ns = 400 * kMs;
  profile.host.functions = {
      Function("Stream::Synchronize", 10, 50 * kMs, 50 * kMs),
      Function("Client::Free", 0, 0, 0),  // never called: neither listed nor counted
      Function("Client::Allocate", 1000, 300 * kMs, 310 * kMs),
      Function("Client::Copy", 90, 50 * kMs, 60 * kMs),
  };
  const std::string text = FormatBottleneckText(profile, ReportOptions());
  EXPECT_THAT(text, HasSubstr("  Host view (libgpumux calls)\n" + std::string(80, '-') +
                              "\n"
                              "         1100 function calls in 0.400 seconds\n"
                              "\n"
                              "   Ordered by: internal time\n"
                              "\n"
                              "   ncalls  tottime  percall  cumtime  percall function\n"
                              "     1000    0.300    0.000    0.310    0.000 Client::Allocate\n"
                              "       90    0.050    0.001    0.060    0.001 Client::Copy\n"
                              "       10    0.050    0.005    0.050    0.005 Stream::Synchronize\n"
                              "\n"));
  EXPECT_THAT(text, Not(HasSubstr("Client::Free")));
  EXPECT_THAT(text, Not(HasSubstr("List reduced")));
}

TEST(BottleneckHostViewTest, ListsOnlyTheTopFunctionsAndSaysSo) {
  Profile profile = BaseProfile();
  for (int i = 0; i < 20; ++i) {
    profile.host.functions.push_back(
        Function(absl::StrFormat("F%02d", i), 1, (i + 1) * kMs, (i + 1) * kMs));
  }
  ReportOptions options;
  options.top = 15;
  const std::string text = FormatBottleneckText(profile, options);
  EXPECT_THAT(text, HasSubstr("   Ordered by: internal time\n"
                              "   List reduced from 20 to 15 due to restriction <15>\n"
                              "\n"
                              "   ncalls  tottime  percall  cumtime  percall function\n"));
  std::vector<std::string> rows = Block(text, "   ncalls");
  ASSERT_EQ(rows.size(), 16u);
  EXPECT_EQ(rows[1], "        1    0.020    0.020    0.020    0.020 F19");
  EXPECT_EQ(rows[15], "        1    0.006    0.006    0.006    0.006 F05");

  options.top = 20;
  const std::string all = FormatBottleneckText(profile, options);
  EXPECT_THAT(all, Not(HasSubstr("List reduced")));
  EXPECT_EQ(Block(all, "   ncalls").size(), 21u);
}

TEST(BottleneckHostViewTest, NoCallsPrintsOnlyTheTotal) {
  Profile profile = BaseProfile();
  profile.host.library_ns = 0;
  profile.host.functions = {Function("Client::Free", 0, 0, 0)};
  const std::string text = FormatBottleneckText(profile, ReportOptions());
  EXPECT_THAT(text, HasSubstr("         0 function calls in 0.000 seconds\n\n---"));
  EXPECT_THAT(text, Not(HasSubstr("Ordered by")));
}

// ---- Device view: key_averages().table() ----

Profile DeviceProfileForTable() {
  Profile profile = BaseProfile();
  profile.device.work = {
      Work("memset", 1, 100 * kUs, 10 * kUs, 200 * kUs, 5 * kUs),
      Work("copy host_to_device", 1, 110 * kUs, 100 * kUs, 300 * kUs, 2 * kMs),
      Work("random normal", 1, 120 * kUs, 20 * kUs, -1, 0),
      Work("memset", 1, 130 * kUs, 10 * kUs, 3 * kMs, 5 * kUs),
  };
  return profile;
}

TEST(BottleneckDeviceViewTest, AggregatesByNameSortedByDeviceTotal) {
  const std::string text = FormatBottleneckText(DeviceProfileForTable(), ReportOptions());
  // Name column: the longest name + 4 = 23; others 12 wide or their header's.
  const std::string header = std::string(19, ' ') + "Name" + "  " + " Self Host %" + "  " +
                             "   Self Host" + "  " + "Host total %" + "  " + "  Host total" + "  " +
                             "Host time avg" + "  " + "   Self CUDA" + "  " + " Self CUDA %" +
                             "  " + "  CUDA total" + "  " + "CUDA time avg" + "  " + "  # of Calls";
  const std::string rule =
      std::string(23, '-') + "  " + std::string(12, '-') + "  " + std::string(12, '-') + "  " +
      std::string(12, '-') + "  " + std::string(12, '-') + "  " + std::string(13, '-') + "  " +
      std::string(12, '-') + "  " + std::string(12, '-') + "  " + std::string(12, '-') + "  " +
      std::string(13, '-') + "  " + std::string(12, '-');
  const std::vector<std::string> table = Block(text, rule);
  ASSERT_EQ(table.size(), 9u) << text;
  EXPECT_EQ(table[0], rule);
  EXPECT_EQ(table[1], header);
  EXPECT_EQ(table[2], rule);
  // Host: 140us in all, device: 2.010ms in all.
  EXPECT_EQ(table[3], std::string("    copy host_to_device") + "  " + "      71.43%" + "  " +
                          "   100.000us" + "  " + "      71.43%" + "  " + "   100.000us" + "  " +
                          "    100.000us" + "  " + "     2.000ms" + "  " + "      99.50%" + "  " +
                          "     2.000ms" + "  " + "      2.000ms" + "  " + "           1");
  EXPECT_THAT(table[4], StartsWith(std::string(17, ' ') + "memset" + "  " + "      14.29%" + "  " +
                                   "    20.000us"));
  EXPECT_THAT(table[4], testing::EndsWith("5.000us             2"));
  EXPECT_THAT(table[5], StartsWith(std::string(10, ' ') + "random normal" + "  " + "      14.29%"));
  EXPECT_THAT(table[5], HasSubstr(std::string("     0.000us") + "  " + "       0.00%" + "  " +
                                  "     0.000us"));
  EXPECT_EQ(table[6], rule);
  EXPECT_EQ(table[7], "Self Host time total: 140.000us");
  EXPECT_EQ(table[8], "Self CUDA time total: 2.010ms");
}

TEST(BottleneckDeviceViewTest, LabelsTheDeviceColumnsAndKeepsTheTop) {
  Profile profile = DeviceProfileForTable();
  ReportOptions options;
  options.device_label = "Device";
  options.top = 1;
  const std::string text = FormatBottleneckText(profile, options);
  EXPECT_THAT(text, HasSubstr("Self Device  Self Device %  Device total  Device time avg"));
  EXPECT_THAT(text, HasSubstr("Self Device time total: 2.010ms\n"));
  EXPECT_THAT(text, HasSubstr("copy host_to_device"));
  EXPECT_THAT(text, Not(HasSubstr("memset")));
  EXPECT_THAT(text, Not(HasSubstr("CUDA total")));
  EXPECT_THAT(text, Not(HasSubstr("Self CUDA")));
}

TEST(BottleneckDeviceViewTest, CutsLongNamesAsPyTorchDoes) {
  Profile profile = BaseProfile();
  profile.device.work = {Work(std::string(60, 'x'), 1, 0, kUs, 0, 3 * kUs),
                         Work(std::string(52, 'z'), 1, 0, kUs, 0, 2 * kUs),
                         Work(std::string(51, 'y'), 1, 0, kUs, 0, kUs)};
  const std::string text = FormatBottleneckText(profile, ReportOptions());
  // The name column is min(60 + 4, 55) wide; names of 52 characters or more
  // are cut to 52 and "...".
  EXPECT_THAT(text, HasSubstr("\n" + std::string(51, '-') + "----  ---"));
  EXPECT_THAT(text, HasSubstr("\n" + std::string(52, 'x') + "...  "));
  EXPECT_THAT(text, HasSubstr("\n" + std::string(52, 'z') + "...  "));
  EXPECT_THAT(text, HasSubstr("\n    " + std::string(51, 'y') + "  "));
}

TEST(BottleneckDeviceViewTest, SaysWhenNothingRanOrWhenRecordsWereDropped) {
  Profile profile = BaseProfile();
  std::string text = FormatBottleneckText(profile, ReportOptions());
  EXPECT_THAT(text, HasSubstr("  Device view (work the daemon ran)\n" + std::string(80, '-') +
                              "\n  no device work was recorded\n"));
  profile.device.work = {Work("random normal", 1, 0, kUs, -1, 0)};
  text = FormatBottleneckText(profile, ReportOptions());
  EXPECT_THAT(text, HasSubstr("         NaN"));  // no device time at all: NaN shares
  EXPECT_THAT(text, Not(HasSubstr("were dropped")));
  profile.device.dropped_work = 12;
  EXPECT_THAT(FormatBottleneckText(profile, ReportOptions()),
              HasSubstr("\n12 device records were dropped"));
}

// ---- Verdict ----

Profile VerdictProfile(int64_t host_ns, std::vector<std::pair<int64_t, int64_t>> device) {
  Profile profile = BaseProfile();
  profile.wall_ns = host_ns + 500;
  profile.host.waiting_ns = 500;
  for (const auto& [start, end] : device) {
    profile.device.work.push_back(Work("kernel", 1, 0, 1, start, end - start));
  }
  return profile;
}

TEST(BottleneckVerdictTest, DeviceTimeIsTheUnionOfTheMeasuredIntervals) {
  Profile profile = VerdictProfile(1000, {{0, 100}, {50, 150}, {60, 70}, {200, 300}});
  profile.device.work.push_back(Work("synchronize", 1, 0, 1, -1, 0));
  const Verdict verdict = ComputeVerdict(profile);
  EXPECT_EQ(verdict.device_ns, 250);
  EXPECT_EQ(verdict.host_ns, 1000);
  EXPECT_EQ(verdict.kind, Verdict::Kind::kHostBound);
  EXPECT_DOUBLE_EQ(verdict.pct_diff, -3.0);
}

TEST(BottleneckVerdictTest, AppliesTheFivePercentRule) {
  EXPECT_EQ(ComputeVerdict(VerdictProfile(950, {{0, 1000}})).kind, Verdict::Kind::kBalanced);
  EXPECT_EQ(ComputeVerdict(VerdictProfile(949, {{0, 1000}})).kind, Verdict::Kind::kDeviceBound);
  EXPECT_EQ(ComputeVerdict(VerdictProfile(1050, {{0, 1000}})).kind, Verdict::Kind::kBalanced);
  EXPECT_EQ(ComputeVerdict(VerdictProfile(1051, {{0, 1000}})).kind, Verdict::Kind::kHostBound);
  EXPECT_DOUBLE_EQ(ComputeVerdict(VerdictProfile(950, {{0, 1000}})).pct_diff, 0.05);

  // No device time: host-bound whatever the host did.
  const Verdict idle = ComputeVerdict(VerdictProfile(0, {}));
  EXPECT_EQ(idle.kind, Verdict::Kind::kHostBound);
  EXPECT_EQ(idle.pct_diff, 0);

  // Waiting longer than the wall time (several threads) clamps at 0.
  Profile waits = VerdictProfile(0, {{0, 1000}});
  waits.host.waiting_ns = waits.wall_ns * 3;
  EXPECT_EQ(ComputeVerdict(waits).host_ns, 0);
  EXPECT_EQ(ComputeVerdict(waits).kind, Verdict::Kind::kDeviceBound);
}

TEST(BottleneckVerdictTest, TextNamesTheKindAndBothTotals) {
  Profile device_bound = VerdictProfile(300 * kMs, {{0, 1200 * kMs}});
  device_bound.wall_ns = 1234 * kMs;
  device_bound.host.waiting_ns = 934 * kMs;
  std::string text = FormatBottleneckText(device_bound, ReportOptions());
  EXPECT_THAT(text, HasSubstr("\nDevice-bound: the device was busy 1.200s and the host (outside "
                              "waits for the device) 300.000ms of the program's 1.234s wall time; "
                              "the host's total is 75.00% below the device's."));

  text = FormatBottleneckText(VerdictProfile(960 * kUs, {{0, kMs}}), ReportOptions());
  EXPECT_THAT(text, HasSubstr("\nBalanced: the device was busy 1.000ms and the host (outside "
                              "waits for the device) 960.000us"));
  EXPECT_THAT(text, HasSubstr("within 5% of each other (4.00% of the device's total apart)"));

  text = FormatBottleneckText(VerdictProfile(3 * kMs, {{0, kMs}}), ReportOptions());
  EXPECT_THAT(text, HasSubstr("\nHost-bound: the device was busy 1.000ms and the host (outside "
                              "waits for the device) 3.000ms"));
  EXPECT_THAT(text, HasSubstr("the host's total is 200.00% above the device's."));
}

// ---- NVTX ----

Profile NvtxProfile() {
  Profile profile = BaseProfile();
  profile.host.start_ns = 0;
  profile.host.end_ns = 20'000;
  NvtxRangeRecord other{"other", 2, 0, 0, -1};
  NvtxRangeRecord epoch{"epoch", 1, 0, 1000, 10'000};
  NvtxRangeRecord step{"step", 1, 1, 2000, 5000};
  profile.device.ranges = {other, epoch, step};
  profile.device.work = {
      Work("memset", 1, 2500, 10, 10'000, 300),   Work("memset", 2, 3000, 10, 10'000, 1000),
      Work("synchronize", 1, 4000, 10, -1, 0),    Work("memset", 1, 6000, 10, 11'000, 200),
      Work("memset", 1, 12'000, 10, 12'000, 700),  // after epoch closed
  };
  return profile;
}

TEST(BottleneckNvtxTest, AttributesTheSessionsWorkQueuedInsideEachRange) {
  const std::string text = FormatBottleneckText(NvtxProfile(), ReportOptions());
  EXPECT_THAT(text, HasSubstr("  NVTX ranges\n" + std::string(80, '-') +
                              "\n"
                              "Range   Session        Host time  Device time  Work\n"
                              "epoch         1          9.000us      0.500us     3\n"
                              "  step        1          3.000us      0.300us     2\n"
                              "other         2  20.000us (open)      1.000us     1\n"));
}

TEST(BottleneckNvtxTest, SaysWhenNoRangeWasOpened) {
  EXPECT_THAT(
      FormatBottleneckText(BaseProfile(), ReportOptions()),
      HasSubstr("  NVTX ranges\n" + std::string(80, '-') + "\n  no NVTX ranges were opened\n"));
}

// ---- Caveats ----

TEST(BottleneckCaveatsTest, MentionsDropsOnlyWhenSomethingWasDropped) {
  Profile profile = BaseProfile();
  std::string text = FormatBottleneckText(profile, ReportOptions());
  EXPECT_THAT(text, HasSubstr("\n1. Device work is asynchronous: "));
  EXPECT_THAT(text, HasSubstr("\n2. The first calls pay for start-up: "));
  EXPECT_THAT(text, HasSubstr("\n3. Profiling costs time: "));
  EXPECT_THAT(text, Not(HasSubstr("\n4. ")));
  EXPECT_THAT(text, Not(HasSubstr("dropped")));

  profile.device.dropped_ranges = 1;
  text = FormatBottleneckText(profile, ReportOptions());
  EXPECT_THAT(text, HasSubstr("\n4. 0 host spans, 0 device records and 1 NVTX ranges were "
                              "dropped: the rings were full. The host view's counts and times are "
                              "exact all the same; the device view and the trace miss what was "
                              "dropped.\n"));
  profile.device.dropped_ranges = 0;
  profile.host.dropped_calls = 7;
  EXPECT_THAT(FormatBottleneckText(profile, ReportOptions()),
              HasSubstr("\n4. 7 host spans, 0 device records and 0 NVTX ranges were dropped"));
}

// ---- JSON ----

TEST(BottleneckJsonTest, HoldsTheReportAsOneObject) {
  Profile profile = NvtxProfile();
  profile.program = "./train \"quoted\"\tand tabbed";
  for (int i = 0; i < 20; ++i) {
    profile.host.functions.push_back(
        Function(absl::StrFormat("F%02d", i), 2, (i + 1) * kMs, (i + 2) * kMs));
  }
  profile.host.functions.push_back(Function("Client::Free", 0, 0, 0));
  profile.device.dropped_work = 4;
  ReportOptions options;
  options.top = 3;
  const std::string text = FormatBottleneckJson(profile, options);
  const std::optional<Json> json = JsonReader::Read(text);
  ASSERT_TRUE(json) << text;
  EXPECT_EQ(json->Keys(),
            (std::vector<std::string>{"environment", "program", "exit", "wall_ns", "host", "device",
                                      "nvtx", "verdict", "caveats"}));
  EXPECT_EQ(json->Find("program")->string, profile.program);
  EXPECT_EQ(json->Find("environment")->Keys(),
            (std::vector<std::string>{"gpumux_version", "daemon_version", "build_type", "compiler",
                                      "os", "backend", "devices"}));
  EXPECT_EQ(json->Find("environment")->Find("devices")->array.size(), 1u);

  // Every called function, not only the top 3, in the text's order.
  const Json& functions = *json->Find("host")->Find("functions");
  ASSERT_EQ(functions.array.size(), 20u);
  EXPECT_EQ(functions.array[0].Find("name")->string, "F19");
  EXPECT_EQ(functions.array[0].Find("calls")->number, 2);
  EXPECT_EQ(functions.array[0].Find("self_ns")->number, 20 * kMs);
  EXPECT_EQ(functions.array[0].Find("total_ns")->number, 21 * kMs);
  EXPECT_EQ(functions.array[19].Find("name")->string, "F00");

  const Json& device = *json->Find("device");
  ASSERT_EQ(device.Find("rows")->array.size(), 2u);
  const Json& memset = device.Find("rows")->array[0];
  EXPECT_EQ(memset.Find("name")->string, "memset");
  EXPECT_EQ(memset.Find("calls")->number, 4);
  EXPECT_EQ(memset.Find("host_ns")->number, 40);
  EXPECT_EQ(memset.Find("device_ns")->number, 2200);
  EXPECT_EQ(device.Find("dropped_work")->number, 4);

  const Json& nvtx = *json->Find("nvtx");
  ASSERT_EQ(nvtx.array.size(), 3u);
  EXPECT_EQ(nvtx.array[1].Find("message")->string, "step");
  EXPECT_EQ(nvtx.array[1].Find("depth")->number, 1);
  EXPECT_EQ(nvtx.array[1].Find("device_ns")->number, 300);
  EXPECT_EQ(nvtx.array[1].Find("work")->number, 2);
  EXPECT_FALSE(nvtx.array[1].Find("open")->boolean);
  EXPECT_EQ(nvtx.array[2].Find("host_ns")->number, 20'000);
  EXPECT_TRUE(nvtx.array[2].Find("open")->boolean);

  const Json& verdict = *json->Find("verdict");
  const Verdict computed = ComputeVerdict(profile);
  EXPECT_EQ(verdict.Find("kind")->string, "host-bound");
  EXPECT_EQ(verdict.Find("host_ns")->number, computed.host_ns);
  EXPECT_EQ(verdict.Find("device_ns")->number, computed.device_ns);
  EXPECT_DOUBLE_EQ(verdict.Find("pct_diff")->number, computed.pct_diff);
  ASSERT_EQ(json->Find("caveats")->array.size(), 4u);
  EXPECT_THAT(json->Find("caveats")->array[3].string, StartsWith("0 host spans, 4 device records"));
}

TEST(BottleneckJsonTest, NamesTheVerdictKinds) {
  auto kind = [](const Profile& profile) {
    return JsonReader::Read(FormatBottleneckJson(profile, ReportOptions()))
        ->Find("verdict")
        ->Find("kind")
        ->string;
  };
  EXPECT_EQ(kind(VerdictProfile(100, {{0, 1000}})), "device-bound");
  EXPECT_EQ(kind(VerdictProfile(1000, {{0, 1000}})), "balanced");
  EXPECT_EQ(kind(VerdictProfile(5000, {{0, 1000}})), "host-bound");
}

// ---- Chrome trace ----

HostCall Call(uint64_t id, uint32_t function, uint32_t thread, uint32_t depth, int64_t start_ns,
              int64_t end_ns) {
  HostCall call;
  call.call_id = id;
  call.function = function;
  call.thread = thread;
  call.depth = depth;
  call.start_ns = start_ns;
  call.end_ns = end_ns;
  return call;
}

Profile TraceProfile() {
  Profile profile = NvtxProfile();
  profile.host.start_ns = 500;
  profile.host.functions = {Function("Client::Copy", 2, 300, 700),
                            Function("Client::Allocate", 1, 200, 200),
                            Function("Stream::Synchronize", 1, 100, 100)};
  // The nested Allocate starts with its parent and comes first here: the
  // trace must still put the parent first.
  profile.host.calls = {Call(11, 1, 1, 1, 1000, 1200), Call(10, 0, 1, 0, 1000, 1500),
                        Call(12, 0, 2, 0, 1100, 1400), Call(13, 2, 2, 0, 1600, 1700)};
  profile.device.work[0].call_id = 10;
  profile.device.work[0].device = 1;
  profile.device.work[1].call_id = 12;
  profile.device.work[1].stream = 3;
  profile.device.work[2].call_id = 13;  // unmeasured: an instant, no flow
  profile.device.work[3].call_id = 99;  // no such host call: no flow
  profile.device.work[4].call_id = 10;
  profile.device.work[4].device = 1;
  return profile;
}

std::string PidTid(const Json& event) {
  return absl::StrFormat("%.0f/%.0f", event.Find("pid")->number, event.Find("tid")->number);
}

TEST(BottleneckTraceTest, EveryEventHasTheRequiredFieldsAndNamedTracks) {
  const std::string text = FormatChromeTrace(TraceProfile());
  const std::optional<Json> json = JsonReader::Read(text);
  ASSERT_TRUE(json) << text;
  EXPECT_EQ(json->Find("displayTimeUnit")->string, "ms");
  const Json* events = json->Find("traceEvents");
  ASSERT_NE(events, nullptr);

  std::map<std::string, std::string> thread_names;  // "pid/tid" -> name
  std::map<double, std::string> process_names;      // pid -> name
  std::set<std::string> used_threads;
  std::map<std::string, int> phases;
  double min_ts = 1e300;
  for (const Json& event : events->array) {
    ASSERT_EQ(event.type, Json::Type::kObject);
    for (const char* key : {"name", "ph", "pid", "tid"}) {
      ASSERT_NE(event.Find(key), nullptr) << key << " missing in " << text;
    }
    const std::string ph = event.Find("ph")->string;
    ++phases[ph];
    if (ph == "M") {
      const Json* args = event.Find("args");
      ASSERT_NE(args, nullptr);
      ASSERT_NE(args->Find("name"), nullptr);
      if (event.Find("name")->string == "process_name") {
        process_names[event.Find("pid")->number] = args->Find("name")->string;
      } else {
        EXPECT_EQ(event.Find("name")->string, "thread_name");
        thread_names[PidTid(event)] = args->Find("name")->string;
      }
      continue;
    }
    ASSERT_NE(event.Find("ts"), nullptr) << PidTid(event);
    EXPECT_EQ(event.Find("ts")->type, Json::Type::kNumber);
    min_ts = std::min(min_ts, event.Find("ts")->number);
    used_threads.insert(PidTid(event));
    if (ph == "X") {
      ASSERT_NE(event.Find("dur"), nullptr);
      EXPECT_GE(event.Find("dur")->number, 0);
      EXPECT_NE(event.Find("cat"), nullptr);
      EXPECT_NE(event.Find("args"), nullptr);
    }
    if (ph == "i") {
      EXPECT_EQ(event.Find("s")->string, "t");
      EXPECT_EQ(event.Find("pid")->number, 99);
    }
  }
  // Host 4 calls, NVTX 3 ranges, 4 measured pieces of work; 1 unmeasured.
  EXPECT_EQ(phases["X"], 11);
  EXPECT_EQ(phases["i"], 1);
  EXPECT_EQ(min_ts, 0);  // the earliest instant: the open range at 0
  for (const std::string& thread : used_threads) {
    EXPECT_TRUE(thread_names.count(thread)) << thread << " has no thread_name";
  }
  EXPECT_EQ(process_names[1], "host: " + TraceProfile().program);
  EXPECT_EQ(process_names[2], "NVTX ranges");
  EXPECT_EQ(process_names[99], "daemon");
  EXPECT_EQ(process_names[100], "device 0");
  EXPECT_EQ(process_names[101], "device 1");
  EXPECT_EQ(thread_names["1/2"], "thread 2");
  EXPECT_EQ(thread_names["2/1"], "session 1");
  EXPECT_EQ(thread_names["101/1"], "session 1 stream 0");
  EXPECT_EQ(thread_names["100/2"], "session 2 stream 3");
}

// Ranges nest per thread: overlapping ranges of two threads of one session
// go on two tracks, so that a viewer does not nest one in the other.
TEST(BottleneckTraceTest, EachThreadsRangesHaveATrackOfTheirOwn) {
  Profile profile = NvtxProfile();
  profile.device.ranges = {NvtxRangeRecord{"loader", 1, 0, 1000, 9000, 5},
                           NvtxRangeRecord{"step", 1, 0, 2000, 5000, 6}};
  const std::optional<Json> json = JsonReader::Read(FormatChromeTrace(profile));
  ASSERT_TRUE(json);
  std::map<std::string, std::string> tracks;  // range -> the name of its track
  std::map<std::string, std::string> names;   // "pid/tid" -> thread_name
  for (const Json& event : json->Find("traceEvents")->array) {
    if (event.Find("pid")->number != 2) continue;
    if (event.Find("ph")->string == "M" && event.Find("name")->string == "thread_name") {
      names[PidTid(event)] = event.Find("args")->Find("name")->string;
    } else if (event.Find("ph")->string == "X") {
      tracks[event.Find("name")->string] = PidTid(event);
    }
  }
  ASSERT_EQ(tracks.size(), 2u);
  EXPECT_NE(tracks["loader"], tracks["step"]);
  EXPECT_EQ(names[tracks["loader"]], "session 1 thread 5");
  EXPECT_EQ(names[tracks["step"]], "session 1 thread 6");
}

TEST(BottleneckTraceTest, FlowsPairHostCallsWithTheWorkTheyQueued) {
  const std::optional<Json> json = JsonReader::Read(FormatChromeTrace(TraceProfile()));
  ASSERT_TRUE(json);
  std::map<double, std::vector<const Json*>> starts;
  std::map<double, std::vector<const Json*>> finishes;
  std::map<std::string, std::set<double>> slice_starts;  // "pid/tid" -> X start times
  std::vector<std::string> host_order;
  for (const Json& event : json->Find("traceEvents")->array) {
    const std::string ph = event.Find("ph")->string;
    if (ph == "s") starts[event.Find("id")->number].push_back(&event);
    if (ph == "f") {
      EXPECT_EQ(event.Find("bp")->string, "e");
      finishes[event.Find("id")->number].push_back(&event);
    }
    if (ph == "X") slice_starts[PidTid(event)].insert(event.Find("ts")->number);
    if (ph == "X" && event.Find("pid")->number == 1)
      host_order.push_back(event.Find("name")->string);
  }
  ASSERT_EQ(starts.size(), 3u);  // work 0, 1 and 4; not the instant nor call 99
  EXPECT_EQ(finishes.size(), 3u);
  double expected_id = 1;
  for (const auto& [id, events] : starts) {
    EXPECT_EQ(id, expected_id++);
    ASSERT_EQ(events.size(), 1u);
    ASSERT_EQ(finishes[id].size(), 1u) << "flow " << id;
    // Each end of the arrow sits at the start of a slice on its track.
    EXPECT_EQ(events[0]->Find("pid")->number, 1);
    EXPECT_TRUE(slice_starts[PidTid(*events[0])].count(events[0]->Find("ts")->number));
    const Json& finish = *finishes[id][0];
    EXPECT_GE(finish.Find("pid")->number, 100);
    EXPECT_TRUE(slice_starts[PidTid(finish)].count(finish.Find("ts")->number));
  }
  // Host call 10 starts at 1000 ns, the origin is 0: 1.0 us. Its work ran at
  // 10 us and 12 us on device 1.
  EXPECT_EQ(starts[1][0]->Find("ts")->number, 1.0);
  EXPECT_EQ(finishes[1][0]->Find("ts")->number, 10.0);
  EXPECT_EQ(finishes[1][0]->Find("pid")->number, 101);
  EXPECT_EQ(finishes[3][0]->Find("ts")->number, 12.0);
  // Thread 1's parent before its child, then thread 2's calls by start.
  EXPECT_EQ(host_order, (std::vector<std::string>{"Client::Copy", "Client::Allocate",
                                                  "Client::Copy", "Stream::Synchronize"}));
}

}  // namespace
}  // namespace gpumux
