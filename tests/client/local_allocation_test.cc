// AllocationMode::kLocal against a real daemon: the client runs PyTorch's
// allocator over segments it leases, so cached allocations make no call;
// the daemon's books hold the leases, daemon work on local blocks fences
// their reuse, and the session's end returns every lease.

#include <stdlib.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "client/client_testing.h"
#include "common/base/status_macros.h"
#include "common/formats/memory_stats.h"
#include "common/ipc/stats_page.h"
#include "gmock/gmock.h"
#include "gpumux/client.h"
#include "gpumux/copy.h"
#include "gpumux/copy_options.h"
#include "gpumux/device_buffer.h"
#include "gpumux/memory.h"
#include "gpumux/observer.h"
#include "gpumux/random.h"
#include "gpumux/random_options.h"
#include "gpumux/v1/memory.pb.h"
#include "gtest/gtest.h"
#include "tests/client/rpc_recorder.h"
#include "tests/status_matchers.h"
#include "tests/support/daemon_client_test.h"

namespace gpumux::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

constexpr uint64_t kMiB = 1 << 20;

ClientOptions Local() {
  ClientOptions options;
  options.allocation = AllocationMode::kLocal;
  options.free_batch_delay = absl::InfiniteDuration();
  return options;
}

class LocalAllocationTest : public DaemonClientTest {
 protected:
  LocalAllocationTest() : DaemonClientTest({.client = Local()}) {}

  int64_t Stat(const std::string& key) {
    absl::StatusOr<std::map<std::string, int64_t>> stats =
        memory::MemoryStats(client(), DeviceIndex(0));
    EXPECT_OK(stats);
    return stats.ok() ? stats->at(key) : -1;
  }
  // The daemon's own books for the device, as another process sees them.
  int64_t DeviceStat(const std::string& key) {
    Observer observer(daemon().address());
    absl::StatusOr<std::map<std::string, int64_t>> stats = observer.MemoryStats(DeviceIndex(0));
    EXPECT_OK(stats);
    return stats.ok() ? stats->at(key) : -1;
  }
};

TEST_F(LocalAllocationTest, CachedAllocationsMakeNoCall) {
  RpcRecorder wire;
  const SessionId session = client().session_id();
  {
    absl::StatusOr<DeviceBuffer> first = memory::Allocate(client(), 4096);
    ASSERT_OK(first);
    EXPECT_TRUE(first->local());
    EXPECT_NE(first->data(), nullptr);
    EXPECT_EQ(first->allocated_size(), 4096u);
  }
  EXPECT_THAT(wire.Calls(session, "Memory/Lease"), SizeIs(1));
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<DeviceBuffer> again = memory::Allocate(client(), 4096);
    ASSERT_OK(again);
  }
  EXPECT_THAT(wire.Calls(session, "Memory/Lease"), SizeIs(1));
  EXPECT_THAT(wire.Calls(session, "Memory/Allocate"), IsEmpty());
  EXPECT_THAT(wire.Calls(session, "Memory/Free"), IsEmpty());
  auto leases = wire.Requests<v1::LeaseRequest>(session, "Memory/Lease");
  EXPECT_EQ(leases[0].size(), 2 * kMiB);  // PyTorch's small-pool segment
  EXPECT_TRUE(leases[0].small_pool());
}

TEST_F(LocalAllocationTest, StatsJoinTheClientsBlocksAndTheDaemonsLeases) {
  absl::StatusOr<DeviceBuffer> a = memory::Allocate(client(), 3 * kMiB);  // a 20 MiB segment
  ASSERT_OK(a);
  absl::StatusOr<DeviceBuffer> b = memory::Allocate(client(), 1000);  // a 2 MiB one
  ASSERT_OK(b);
  EXPECT_EQ(Stat("allocated_bytes.all.current"), static_cast<int64_t>(3 * kMiB + 1024));
  EXPECT_EQ(Stat("requested_bytes.all.current"), static_cast<int64_t>(3 * kMiB + 1000));
  EXPECT_EQ(Stat("reserved_bytes.all.current"), static_cast<int64_t>(22 * kMiB));
  EXPECT_EQ(Stat("segment.all.current"), 2);
  EXPECT_EQ(Stat("allocation.all.current"), 2);
  // The daemon holds the leases, whoever asks.
  EXPECT_EQ(DeviceStat("reserved_bytes.all.current"), static_cast<int64_t>(22 * kMiB));
  absl::StatusOr<int64_t> allocated = memory::MemoryAllocated(client());
  ASSERT_OK(allocated);
  EXPECT_EQ(*allocated, static_cast<int64_t>(3 * kMiB + 1024));
  absl::StatusOr<std::string> summary = memory::MemorySummary(client());
  ASSERT_OK(summary);
  EXPECT_THAT(*summary, HasSubstr("PyTorch CUDA memory summary, device ID 0"));
  // The session's snapshot has the leases' blocks.
  absl::StatusOr<std::vector<SegmentInfo>> snapshot = memory::MemorySnapshot(client());
  ASSERT_OK(snapshot);
  ASSERT_THAT(*snapshot, SizeIs(2));
  uint64_t allocated_in_snapshot = 0;
  for (const SegmentInfo& s : *snapshot) {
    EXPECT_TRUE(s.leased);
    EXPECT_FALSE(s.shareable);
    EXPECT_FALSE(s.blocks.empty());
    allocated_in_snapshot += s.allocated_size;
  }
  EXPECT_EQ(allocated_in_snapshot, 3 * kMiB + 1024);
}

TEST_F(LocalAllocationTest, AnotherProcesssViewEqualsTheClientsOwnAtAQuiescentPoint) {
  std::vector<DeviceBuffer> held;
  for (uint64_t size : {uint64_t{512}, uint64_t{4096}, 3 * kMiB, 25 * kMiB, uint64_t{70000}}) {
    absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), size);
    ASSERT_OK(buffer);
    held.push_back(std::move(*buffer));
  }
  held.erase(held.begin() + 1);  // a free: inactive split and freed counters move
  absl::StatusOr<std::map<std::string, int64_t>> own =
      memory::MemoryStats(client(), DeviceIndex(0));
  ASSERT_OK(own);
  EXPECT_EQ(own->size(), 122u);
  Observer observer(daemon().address());
  absl::StatusOr<std::map<std::string, int64_t>> seen =
      observer.MemoryStats(DeviceIndex(0), client().session_id());
  ASSERT_OK(seen);
  EXPECT_EQ(*seen, *own);  // all 122 keys
  // The device's figures are the daemon's plus the page's.
  absl::StatusOr<std::map<std::string, int64_t>> device = observer.MemoryStats(DeviceIndex(0));
  ASSERT_OK(device);
  EXPECT_EQ(device->at("allocated_bytes.all.current"), own->at("allocated_bytes.all.current"));
  EXPECT_EQ(device->at("reserved_bytes.all.current"), own->at("reserved_bytes.all.current"));
  absl::StatusOr<std::vector<SessionInfo>> sessions = observer.ListSessions();
  ASSERT_OK(sessions);
  ASSERT_THAT(*sessions, SizeIs(1));
  EXPECT_TRUE((*sessions)[0].stats_page);
  EXPECT_FALSE((*sessions)[0].stats_page_rejected);
  EXPECT_EQ((*sessions)[0].devices[0].allocated_bytes,
            static_cast<uint64_t>(own->at("allocated_bytes.all.current")));
}

TEST_F(LocalAllocationTest, AStatsPageOfGarbageChangesNoOtherSessionsFigures) {
  absl::StatusOr<DeviceBuffer> mine = memory::Allocate(client(), 4096);
  ASSERT_OK(mine);
  std::unique_ptr<Client> other = ConnectAnother(Local());
  ASSERT_NE(other, nullptr);
  absl::StatusOr<DeviceBuffer> theirs = memory::Allocate(*other, 12 * kMiB);
  ASSERT_OK(theirs);
  Observer observer(daemon().address());
  auto before = observer.MemoryStats(DeviceIndex(0), other->session_id());
  ASSERT_OK(before);
  // The hostile client writes all over its page, header and slots.
  void* page = gpumux::StatsPageForTest(client());
  ASSERT_NE(page, nullptr);
  std::memset(page, 0x7f, StatsPageBytes(2));
  auto after = observer.MemoryStats(DeviceIndex(0), other->session_id());
  ASSERT_OK(after);
  EXPECT_EQ(*after, *before);
  // Its own figures fall back to the daemon's books: its lease, no blocks.
  auto own = observer.MemoryStats(DeviceIndex(0), client().session_id());
  ASSERT_OK(own);
  EXPECT_EQ(own->at("reserved_bytes.all.current"), static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(own->at("allocated_bytes.all.current"), 0);
  // The device's: the other session's and the daemon's leases.
  auto device = observer.MemoryStats(DeviceIndex(0));
  ASSERT_OK(device);
  EXPECT_EQ(device->at("allocated_bytes.all.current"), static_cast<int64_t>(12 * kMiB));
  // Plausible-looking lies are judged against the daemon's books too: a
  // fresh header with allocated bytes above what the session has leased.
  InitStatsPage(page, 2);
  DeviceStats lie;
  lie.allocated_bytes[kAggregate].current = lie.allocated_bytes[kAggregate].peak = 1 << 30;
  lie.active_bytes[kAggregate] = lie.allocated_bytes[kAggregate];
  absl::StatusOr<StatsPageWriter> writer = StatsPageWriter::Attach(page, StatsPageBytes(2), 2);
  ASSERT_OK(writer);
  writer->Publish(0, lie);
  own = observer.MemoryStats(DeviceIndex(0), client().session_id());
  ASSERT_OK(own);
  EXPECT_EQ(own->at("allocated_bytes.all.current"), 0);
  absl::StatusOr<std::vector<SessionInfo>> sessions = observer.ListSessions();
  ASSERT_OK(sessions);
  for (const SessionInfo& s : *sessions) {
    EXPECT_EQ(s.stats_page_rejected, s.session_id == client().session_id()) << s.session_id.value();
  }
  // The daemon serves on, for both.
  EXPECT_OK(memory::Allocate(client(), 4096).status());
  EXPECT_OK(memory::MemoryStats(*other, DeviceIndex(0)).status());
}

// The device's counters never go back: not when a client resets its own,
// nor when a local-mode session ends (Prometheus reads a counter that falls
// as a reset); nor do its peaks.
TEST_F(LocalAllocationTest, TheDevicesCountersOutliveTheSessionsThatCounted) {
  std::unique_ptr<Client> other = ConnectAnother(Local());
  ASSERT_NE(other, nullptr);
  ASSERT_OK(memory::SetPerProcessMemoryFraction(*other, 0.1, DeviceIndex(0)));  // 6.4 of 64 MiB
  absl::StatusOr<DeviceBuffer> held = memory::Allocate(*other, kMiB / 2);
  ASSERT_OK(held);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(absl::IsResourceExhausted(memory::Allocate(*other, 60 * kMiB).status()));
  }
  EXPECT_EQ(DeviceStat("num_ooms"), 3);
  const int64_t allocations = DeviceStat("allocation.all.allocated");
  const int64_t peak = DeviceStat("allocated_bytes.all.peak");
  EXPECT_GE(allocations, 1);
  EXPECT_GE(peak, static_cast<int64_t>(kMiB / 2));
  // The client resets its own: its figures restart, the device's do not.
  ASSERT_OK(memory::ResetAccumulatedMemoryStats(*other, DeviceIndex(0)));
  ASSERT_OK(memory::ResetPeakMemoryStats(*other, DeviceIndex(0)));
  EXPECT_EQ(memory::MemoryStats(*other, DeviceIndex(0))->at("num_ooms"), 0);
  EXPECT_EQ(DeviceStat("num_ooms"), 3);
  EXPECT_EQ(DeviceStat("allocation.all.allocated"), allocations);
  // Counted again after the reset, on top of what was.
  EXPECT_TRUE(absl::IsResourceExhausted(memory::Allocate(*other, 60 * kMiB).status()));
  EXPECT_EQ(DeviceStat("num_ooms"), 4);
  // The session ends holding its block: reclaimed, it counts as freed.
  held = DeviceBuffer();
  other.reset();
  EXPECT_EQ(DeviceStat("num_ooms"), 4);
  EXPECT_EQ(DeviceStat("allocation.all.allocated"), allocations);
  EXPECT_EQ(DeviceStat("allocation.all.freed"), allocations);
  EXPECT_EQ(DeviceStat("allocated_bytes.all.current"), 0);
  EXPECT_GE(DeviceStat("allocated_bytes.all.peak"), peak);
}

TEST_F(LocalAllocationTest, EmptyCacheReturnsWhollyFreeLeases) {
  {
    absl::StatusOr<DeviceBuffer> a = memory::Allocate(client(), 12 * kMiB);
    ASSERT_OK(a);
  }
  EXPECT_EQ(DeviceStat("reserved_bytes.all.current"), static_cast<int64_t>(12 * kMiB));
  absl::StatusOr<ReleasedCache> released = memory::EmptyCache(client());
  ASSERT_OK(released);
  EXPECT_EQ(released->released_bytes, 12 * kMiB);
  EXPECT_EQ(released->released_segments, 1u);
  EXPECT_EQ(DeviceStat("reserved_bytes.all.current"), 0);
  EXPECT_EQ(Stat("reserved_bytes.all.current"), 0);
}

TEST_F(LocalAllocationTest, EveryLeaseGoesBackWhenTheClientCloses) {
  {
    std::vector<DeviceBuffer> held;
    for (int i = 0; i < 3; ++i) {
      absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 12 * kMiB);
      ASSERT_OK(buffer);
      held.push_back(std::move(*buffer));
    }
  }
  // Cached in the client now, and still leased.
  EXPECT_EQ(DeviceStat("reserved_bytes.all.current"), static_cast<int64_t>(36 * kMiB));
  DisconnectClient();
  EXPECT_EQ(DeviceStat("reserved_bytes.all.current"), 0);
}

TEST_F(LocalAllocationTest, ALimitHoldsWithPyTorchsMessage) {
  ASSERT_OK(memory::SetMemoryLimit(client(), 20 * kMiB));  // one 12 MiB segment fits, two do not
  absl::StatusOr<DeviceBuffer> a = memory::Allocate(client(), 12 * kMiB);
  ASSERT_OK(a);
  absl::StatusOr<DeviceBuffer> b = memory::Allocate(client(), 12 * kMiB);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(b.status().message(), HasSubstr("CUDA out of memory. Tried to allocate 12.00 MiB"));
  EXPECT_EQ(Stat("num_ooms"), 1);
}

TEST_F(LocalAllocationTest, AFullDeviceIsOutOfMemoryAndTheCacheIsRetried) {
  std::vector<DeviceBuffer> held;
  // Two host devices of 64 MiB: three 20 MiB leases fit, a fourth does not.
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 20 * kMiB);
    ASSERT_OK(buffer);
    held.push_back(std::move(*buffer));
  }
  absl::StatusOr<DeviceBuffer> over = memory::Allocate(client(), 20 * kMiB);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.status().message(), HasSubstr("CUDA out of memory"));
  held.pop_back();  // a cached 20 MiB block: the next one of that size reuses it
  absl::StatusOr<DeviceBuffer> reused = memory::Allocate(client(), 20 * kMiB);
  EXPECT_OK(reused);
  held.clear();
  reused = absl::UnavailableError("dropped");
  // A different size cannot reuse the cached 20 MiB segments: the retry
  // returns them to the daemon and leases anew.
  absl::StatusOr<DeviceBuffer> big = memory::Allocate(client(), 60 * kMiB);
  EXPECT_OK(big);
  EXPECT_GE(Stat("num_alloc_retries"), 1);
}

TEST_F(LocalAllocationTest, CopiesFillsAndMemsetsReachLocalBlocks) {
  absl::StatusOr<DeviceBuffer> dst = memory::Allocate(client(), 8192);
  ASSERT_OK(dst);
  absl::StatusOr<DeviceBuffer> src = memory::Allocate(client(), 8192);
  ASSERT_OK(src);
  ASSERT_NE(dst->offset(), src->offset());  // one lease, two blocks
  std::vector<char> pattern(8192);
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<char>(i * 7);
  CopyOptions wait;
  wait.wait = true;
  ASSERT_OK(copy::HostToDevice(client(), *src, 0, pattern.data(), pattern.size(), wait).status());
  EXPECT_EQ(std::memcmp(src->data(), pattern.data(), pattern.size()), 0);
  ASSERT_OK(copy::DeviceToDevice(client(), *dst, 0, *src, 0, 8192, wait).status());
  EXPECT_EQ(std::memcmp(dst->data(), pattern.data(), pattern.size()), 0);
  ASSERT_OK(copy::Memset(client(), *dst, 100, 0x5a, 10, wait).status());
  EXPECT_EQ(static_cast<const char*>(dst->data())[105], 0x5a);
  EXPECT_EQ(static_cast<const char*>(dst->data())[110], pattern[110]);
  std::vector<char> back(8192);
  ASSERT_OK(copy::DeviceToHost(client(), back.data(), *src, 0, back.size(), wait).status());
  EXPECT_EQ(back, pattern);
  ASSERT_OK(
      random::Generate(client(), *dst, 0, Dtype::kFloat32, 2048, Uniform{0, 1}, wait).status());
  const float* values = static_cast<const float*>(dst->data());
  for (int i = 0; i < 2048; ++i) ASSERT_TRUE(values[i] >= 0 && values[i] < 1) << i;
}

TEST_F(LocalAllocationTest, RangesAreCheckedAgainstTheBlockNotTheLease) {
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 4096);
  ASSERT_OK(buffer);
  absl::StatusOr<DeviceBuffer> neighbour = memory::Allocate(client(), 4096);
  ASSERT_OK(neighbour);
  char byte = 1;
  EXPECT_EQ(copy::HostToDevice(client(), *buffer, 4096, &byte, 1).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(copy::Memset(client(), *buffer, 0, 0, 4097).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(
      random::Generate(client(), *buffer, 0, Dtype::kFloat32, 1025, Uniform{0, 1}).status().code(),
      absl::StatusCode::kOutOfRange);
}

TEST_F(LocalAllocationTest, ABlockIsNotReusedBeforeTheDaemonsWorkOnItCompleted) {
  // A 32 MiB memset queued without waiting, and the block freed at once.
  absl::StatusOr<DeviceBuffer> block = memory::Allocate(client(), 32 * kMiB);
  ASSERT_OK(block);
  const uint64_t address = block->address();
  ASSERT_OK(copy::Memset(client(), *block, 0, 0x11, 32 * kMiB).status());  // not waited for
  *block = DeviceBuffer();  // freed while the memset may still run
  absl::StatusOr<DeviceBuffer> next = memory::Allocate(client(), 32 * kMiB);
  ASSERT_OK(next);
  if (next->address() == address) {
    // Reused: only after the memset completed, so its bytes are all there.
    const unsigned char* bytes = static_cast<const unsigned char*>(next->data());
    for (uint64_t i = 0; i < 32 * kMiB; i += 4096) ASSERT_EQ(bytes[i], 0x11) << i;
  }
  ASSERT_OK(client().Synchronize(DeviceIndex(0)));
}

TEST_F(LocalAllocationTest, ShareableAllocationsStillComeFromTheDaemon) {
  AllocateOptions shareable;
  shareable.shareable = true;
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 4096, DeviceIndex(0), shareable);
  ASSERT_OK(buffer);
  EXPECT_FALSE(buffer->local());
  absl::StatusOr<std::string> token = memory::Share(client(), *buffer);
  ASSERT_OK(token);
  std::unique_ptr<Client> other = ConnectAnother();
  ASSERT_NE(other, nullptr);
  EXPECT_OK(memory::Import(*other, *token));
  // A local block cannot be shared: its lease is not shareable.
  absl::StatusOr<DeviceBuffer> local = memory::Allocate(client(), 4096);
  ASSERT_OK(local);
  EXPECT_EQ(memory::Share(client(), *local).status().code(), absl::StatusCode::kFailedPrecondition);
}

// GPUMUX_ALLOCATION as this test sets it; restored (or unset) at the end.
class AllocationEnvironmentTest : public DaemonClientTest {
 protected:
  AllocationEnvironmentTest() : DaemonClientTest({.connect = false}) {
    if (const char* value = getenv("GPUMUX_ALLOCATION")) saved_ = value;
  }
  ~AllocationEnvironmentTest() override {
    if (saved_.has_value()) {
      setenv("GPUMUX_ALLOCATION", saved_->c_str(), 1);
    } else {
      unsetenv("GPUMUX_ALLOCATION");
    }
  }

  // Whether a client connected with `mode` while the environment holds
  // `value` (nullopt: unset) allocates locally.
  absl::StatusOr<bool> AllocatesLocally(std::optional<std::string> value,
                                        AllocationMode mode = AllocationMode::kDefault) {
    if (value.has_value()) {
      setenv("GPUMUX_ALLOCATION", value->c_str(), 1);
    } else {
      unsetenv("GPUMUX_ALLOCATION");
    }
    ClientOptions options;
    options.allocation = mode;
    GPUMUX_ASSIGN_OR_RETURN(std::unique_ptr<Client> client,
                            Client::Connect(daemon().address(), options));
    GPUMUX_ASSIGN_OR_RETURN(DeviceBuffer buffer, memory::Allocate(*client, 4096));
    return buffer.local();
  }

 private:
  std::optional<std::string> saved_;
};

TEST_F(AllocationEnvironmentTest, TheDefaultIsLocalUnlessTheEnvironmentSaysDaemon) {
  EXPECT_THAT(AllocatesLocally(std::nullopt), IsOkAndHolds(true));
  EXPECT_THAT(AllocatesLocally(""), IsOkAndHolds(true));
  EXPECT_THAT(AllocatesLocally("local"), IsOkAndHolds(true));
  EXPECT_THAT(AllocatesLocally("daemon"), IsOkAndHolds(false));
  EXPECT_THAT(
      AllocatesLocally("fast"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "GPUMUX_ALLOCATION=fast is neither \"daemon\" nor \"local\" (unset: local)"));
  // ClientOptions::allocation, when set, is what counts.
  EXPECT_THAT(AllocatesLocally("local", AllocationMode::kDaemon), IsOkAndHolds(false));
  EXPECT_THAT(AllocatesLocally("daemon", AllocationMode::kLocal), IsOkAndHolds(true));
  EXPECT_THAT(AllocatesLocally("fast", AllocationMode::kDaemon), IsOkAndHolds(false));
}

}  // namespace
}  // namespace gpumux::testing
