// The CLI's JSON and table formatting of the client API's types.

#include <cstdint>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "client/cli/devices_format.h"
#include "client/cli/sessions_format.h"
#include "client/cli/snapshot_format.h"
#include "client/cli/stats_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpumux {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// The quoted strings of a JSON list file, in order.
std::vector<std::string> QuotedStrings(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = text.find('"', pos)) != std::string::npos) {
    size_t end = text.find('"', pos + 1);
    out.push_back(text.substr(pos + 1, end - pos - 1));
    pos = end + 1;
  }
  return out;
}

// The keys of a flat JSON object, in order.
std::vector<std::string> ObjectKeys(const std::string& json) {
  std::vector<std::string> keys;
  std::istringstream lines(json);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.size() > 1 && line[1] == '"') keys.push_back(line.substr(2, line.find('"', 2) - 2));
  }
  return keys;
}

TEST(StatsFormatTest, JsonHasExactlyPyTorchsKeysSortedWithIntegerValues) {
  const std::map<std::string, int64_t> stats = {
      {"allocated_bytes.all.current", 1024}, {"num_ooms", 2}, {"not_a_torch_key", 5}};
  const std::string json = FormatStatsJson(stats);

  std::ifstream file(GPUMUX_SOURCE_DIR "/testdata/torch_memory_stats_keys.json");
  std::stringstream expected;
  expected << file.rdbuf();
  std::vector<std::string> torch_keys = QuotedStrings(expected.str());
  ASSERT_EQ(torch_keys.size(), 122u);
  std::sort(torch_keys.begin(), torch_keys.end());
  EXPECT_EQ(ObjectKeys(json), torch_keys);

  EXPECT_THAT(json, StartsWith("{\n \"active.all.allocated\": 0,\n"));
  EXPECT_THAT(json, HasSubstr("\n \"allocated_bytes.all.current\": 1024,\n"));
  EXPECT_THAT(json, HasSubstr("\n \"num_ooms\": 2,\n"));
  EXPECT_THAT(json, ::testing::EndsWith("\n}\n"));
  EXPECT_THAT(json, ::testing::Not(HasSubstr("not_a_torch_key")));
}

TEST(StatsFormatTest, LinesAreAlignedKeyValuePairs) {
  const std::map<std::string, int64_t> stats = {{"allocated_bytes.all.current", 1024}};
  const std::string lines = FormatStatsLines(stats);
  EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 122);
  EXPECT_THAT(lines, StartsWith("active.all.allocated "));
  EXPECT_THAT(lines, HasSubstr("\nallocated_bytes.all.current     "));
  EXPECT_THAT(lines, HasSubstr(" 1024\n"));
  EXPECT_THAT(lines, HasSubstr("\nnum_ooms "));
}

std::vector<SegmentInfo> ExampleSnapshot() {
  SegmentInfo segment;
  segment.device = 0;
  segment.address = 139682839003136;
  segment.total_size = 20971520;
  segment.allocated_size = 3145728;
  segment.active_size = 3145728;
  segment.requested_size = 3000000;
  segment.segment_type = "large";
  segment.session_id = SessionId(7);
  segment.segment_id = SegmentId(3);
  segment.shareable = true;
  segment.blocks.push_back({.address = 139682839003136,
                            .size = 3145728,
                            .requested_size = 3000000,
                            .state = "active_allocated",
                            .session_id = SessionId(7)});
  segment.blocks.push_back({.address = 139682842148864, .size = 17825792, .state = "inactive"});
  return {segment};
}

TEST(SnapshotFormatTest, JsonIsPyTorchsSegmentListPlusGpumuxFields) {
  // Python: json.dumps(torch.cuda.memory_snapshot() + gpumux's keys, indent=1).
  EXPECT_EQ(FormatSnapshotJson(ExampleSnapshot()),
            R"([
 {
  "device": 0,
  "address": 139682839003136,
  "total_size": 20971520,
  "allocated_size": 3145728,
  "active_size": 3145728,
  "requested_size": 3000000,
  "stream": 0,
  "segment_type": "large",
  "segment_pool_id": [
   0,
   0
  ],
  "is_expandable": false,
  "frames": [],
  "blocks": [
   {
    "address": 139682839003136,
    "size": 3145728,
    "requested_size": 3000000,
    "state": "active_allocated",
    "frames": []
   },
   {
    "address": 139682842148864,
    "size": 17825792,
    "requested_size": 0,
    "state": "inactive",
    "frames": []
   }
  ],
  "session_id": 7,
  "segment_id": 3,
  "shareable": true,
  "leased": false
 }
]
)");
  EXPECT_EQ(FormatSnapshotJson({}), "[]\n");
}

SegmentInfo UnavailableLease() {
  SegmentInfo segment;
  segment.address = 0x7f0a74000000;
  segment.total_size = 2 << 20;
  segment.segment_type = "small";
  segment.session_id = SessionId(9);
  segment.segment_id = SegmentId(4);
  segment.leased = true;
  segment.blocks_unavailable = true;
  segment.blocks_unavailable_reason =
      "blocks unavailable: session 9's client did not answer within 1s";
  return segment;
}

TEST(SnapshotFormatTest, ALeaseWithoutItsBlocksSaysWhy) {
  const std::string json = FormatSnapshotJson({UnavailableLease()});
  EXPECT_THAT(json, HasSubstr("  \"blocks\": [],\n"));
  EXPECT_THAT(json,
              HasSubstr("  \"leased\": true,\n  \"blocks_unavailable\": \"blocks unavailable: "
                        "session 9's client did not answer within 1s\"\n }"));
  EXPECT_EQ(FormatSnapshotTable({UnavailableLease()}),
            "DEVICE  SEGMENT  SESSION  ADDRESS         TYPE      TOTAL  ALLOCATED   ACTIVE  "
            "REQUESTED       BLOCKS  SHAREABLE\n"
            "     0        4        9  0x7f0a74000000  small  2.00 MiB    0 bytes  0 bytes    "
            "0 bytes  unavailable  no\n"
            "segment 4: blocks unavailable: session 9's client did not answer within 1s\n");
}

TEST(SnapshotFormatTest, TableHasOneLinePerSegment) {
  EXPECT_EQ(FormatSnapshotTable(ExampleSnapshot()),
            "DEVICE  SEGMENT  SESSION  ADDRESS         TYPE       TOTAL  ALLOCATED    ACTIVE  "
            "REQUESTED  BLOCKS  SHAREABLE\n"
            "     0        3        7  0x7f0a72000000  large  20.00 MiB   3.00 MiB  3.00 MiB  "
            " 2.86 MiB       2  yes\n");
}

TEST(DevicesFormatTest, TableAndJson) {
  DeviceProperties device;
  device.index = 0;
  device.name = "NVIDIA H200";
  device.backend = "cuda";
  device.total_memory = uint64_t{150} << 30;
  device.free_memory = uint64_t{100} << 30;
  device.major = 9;
  device.minor = 0;
  device.multi_processor_count = 132;
  device.pci_bus_id = "00000000:19:00.0";
  device.arch_list = {"sm_90", "compute_90"};
  device.gencode_flags =
      "-gencode compute=compute_90,code=sm_90 -gencode compute=compute_90,code=compute_90";
  device.driver_version = 13000;
  device.runtime_version = 13000;
  device.collectives = "nccl 2.28.9";
  device.healthy = true;
  device.health = "ok";
  const std::vector<DeviceProperties> devices = {device};
  EXPECT_EQ(FormatDevicesTable(devices),
            "INDEX  NAME         BACKEND       TOTAL        FREE  CAPABILITY  SMS  PCI             "
            "  HEALTH\n"
            "    0  NVIDIA H200  cuda     150.00 GiB  100.00 GiB         9.0  132  "
            "00000000:19:00.0  ok\n");
  EXPECT_EQ(FormatDevicesJson(devices),
            "[\n {\n  \"index\": 0,\n  \"name\": \"NVIDIA H200\",\n  \"backend\": \"cuda\",\n"
            "  \"total_memory\": 161061273600,\n  \"free_memory\": 107374182400,\n"
            "  \"major\": 9,\n  \"minor\": 0,\n  \"multi_processor_count\": 132,\n"
            "  \"pci_bus_id\": \"00000000:19:00.0\",\n  \"arch_list\": [\n   \"sm_90\",\n   "
            "\"compute_90\"\n  ],\n"
            "  \"gencode_flags\": \"-gencode compute=compute_90,code=sm_90 -gencode "
            "compute=compute_90,code=compute_90\",\n"
            "  \"driver_version\": 13000,\n  \"runtime_version\": 13000,\n"
            "  \"collectives\": \"nccl 2.28.9\",\n  \"healthy\": true,\n"
            "  \"health\": \"ok\"\n }\n]\n");
}

std::vector<SessionInfo> ExampleSessions() {
  SessionInfo trainer;
  trainer.session_id = SessionId(7);
  trainer.client_name = "trainer";
  trainer.pid = 4242;
  trainer.tenant = "team-a";
  trainer.labels = {{"pod", "p-1"}, {"namespace", "ml"}};
  trainer.opened_unix_micros = 1700000000000000;
  trainer.streams = 3;
  trainer.events = 12;
  trainer.devices.push_back(
      {.device = 0, .allocated_bytes = 1024, .reserved_bytes = 2 << 20, .allocations = 1});
  trainer.devices.push_back(
      {.device = 1, .reserved_bytes = 20 << 20, .memory_limit_bytes = uint64_t{1} << 30});
  SessionInfo idle;
  idle.session_id = SessionId(8);
  idle.client_name = "idle";
  idle.pid = 1;
  return {trainer, idle};
}

TEST(SessionsFormatTest, TableHasARowPerSessionAndDevice) {
  // PyTorch's format_size prints exactly 1 GiB as "1024.00 MiB".
  EXPECT_EQ(FormatSessionsTable(ExampleSessions()),
            "ID   PID  NAME     TENANT  LABELS                STREAMS  EVENTS  DEVICE   ALLOCATED"
            "   RESERVED  ALLOCATIONS        LIMIT\n"
            " 7  4242  trainer  team-a  namespace=ml,pod=p-1        3      12       0  1024 bytes"
            "   2.00 MiB            1            -\n"
            "                                                                       1     0 bytes"
            "  20.00 MiB            0  1024.00 MiB\n"
            " 8     1  idle     -       -                           0       0       -           -"
            "          -            -            -\n");
}

TEST(SessionsFormatTest, JsonListsSessionsWithSortedLabels) {
  const std::string json = FormatSessionsJson(ExampleSessions());
  EXPECT_THAT(json,
              HasSubstr("\"labels\": {\n   \"namespace\": \"ml\",\n   \"pod\": \"p-1\"\n  },"));
  EXPECT_THAT(json,
              HasSubstr("\"session_id\": 7,\n  \"client_name\": \"trainer\",\n  \"pid\": 4242"));
  EXPECT_THAT(json, HasSubstr("\"memory_limit_bytes\": 1073741824\n"));
  EXPECT_THAT(json, HasSubstr("\"opened_unix_micros\": 1700000000000000,\n  \"streams\": 3,\n"
                              "  \"events\": 12,\n  \"stats_page\": false,\n"
                              "  \"stats_page_rejected\": false,\n  \"devices\": ["));
  EXPECT_THAT(json, HasSubstr("\"streams\": 0,\n  \"events\": 0,\n  \"stats_page\": false,\n"
                              "  \"stats_page_rejected\": false,\n  \"devices\": []\n"));
  EXPECT_THAT(json, HasSubstr("\"labels\": {},"));
  EXPECT_THAT(json, HasSubstr("\"devices\": []\n"));
}

}  // namespace
}  // namespace gpumux
