// Compact mode (--allocator-conf compact_segments:True) across real
// processes on the host backend: the pages of a grown expandable segment
// reach the client, which writes them where the daemon and another session
// read them; pages the daemon unmaps become inaccessible in the client; a
// SIGKILLed client's pages come back within a second; a hostile client that
// unmaps, remaps and truncates its pages hurts nobody.

#include <signal.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gpumux/client.h"
#include "gpumux/copy.h"
#include "gpumux/memory.h"
#include "gpumux/v1/observe.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/cross_process/child_process.h"
#include "tests/support/raw_session.h"
#include "tests/support/test_pattern.h"

namespace gpumux::testing {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr char kCompact[] = "--allocator-conf=compact_segments:True";

int64_t DeviceStat(const std::shared_ptr<grpc::Channel>& channel, const std::string& key) {
  auto observe = v1::Observe::NewStub(channel);
  v1::ObserveStatsRequest request;
  request.set_device(0);
  v1::MemoryStats stats;
  grpc::ClientContext context;
  grpc::Status status = observe->GetMemoryStats(&context, request, &stats);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return stats.values().at(key);
}

// The permissions ("rw-s", "---p") of this process's mapping holding `p`.
std::string Permissions(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::string range, permissions;
    in >> range >> permissions;
    const size_t dash = range.find('-');
    const uintptr_t begin = std::stoull(range.substr(0, dash), nullptr, 16);
    const uintptr_t end = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (address >= begin && address < end) return permissions;
  }
  return "";
}

TEST(CompactModeTest, GrownSegmentsPagesAreSharedWithTheDaemonAndAnotherSession) {
  DaemonProcess daemon({"--host-devices=1", "--host-device-memory=1GiB", kCompact});
  auto client = Client::Connect(daemon.address(), {.client_name = "grower"});
  ASSERT_TRUE(client.ok()) << client.status();
  auto a = memory::Allocate(*(*client), 3 * kMiB, DeviceIndex(0));
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = memory::Allocate(*(*client), 3 * kMiB,
                            DeviceIndex(0));  // grows the segment by a page
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->segment_id(), a->segment_id());
  EXPECT_EQ(b->address(), a->address() + 3 * kMiB);
  EXPECT_EQ(static_cast<char*>(b->data()), static_cast<char*>(a->data()) + 3 * kMiB);
  EXPECT_EQ(DeviceStat(daemon.channel(), "reserved_bytes.all.current"),
            static_cast<int64_t>(6 * kMiB));
  auto segments = memory::MemorySnapshot(*(*client), DeviceIndex(0));
  ASSERT_TRUE(segments.ok()) << segments.status();
  ASSERT_EQ(segments->size(), 1u);
  EXPECT_TRUE(segments->front().is_expandable);
  EXPECT_EQ(segments->front().total_size, 6 * kMiB);

  // Written here across its two pages, read by the daemon.
  FillPattern(b->data(), b->size(), 5);
  std::vector<unsigned char> back(b->size());
  ASSERT_TRUE(copy::DeviceToHost(*(*client), back.data(), *b, 0, b->size()).ok());
  EXPECT_EQ(FirstPatternMismatch(back.data(), back.size(), 5), back.size());

  // Copied by the daemon into a shareable allocation another process imports.
  auto shared = memory::Allocate(*(*client), b->size(), DeviceIndex(0), {.shareable = true});
  ASSERT_TRUE(shared.ok()) << shared.status();
  ASSERT_TRUE(copy::DeviceToDevice(*(*client), *shared, 0, *b, 0, b->size(), {.wait = true}).ok());
  auto token = memory::Share(*(*client), *shared);
  ASSERT_TRUE(token.ok()) << token.status();
  Child consumer({"consumer", daemon.address(), *token, std::to_string(b->size()), "5", "6"});
  ASSERT_EQ(consumer.Wait(), 0) << "the consumer did not read the grown segment's bytes";
  EXPECT_EQ(FirstPatternMismatch(shared->data(), shared->size(), 6), shared->size());
}

TEST(CompactModeTest, PagesTheDaemonUnmapsBecomeInaccessibleInTheClient) {
  DaemonProcess daemon({"--host-devices=1", "--host-device-memory=1GiB", kCompact});
  auto client = Client::Connect(daemon.address(), {.client_name = "shrinker"});
  ASSERT_TRUE(client.ok()) << client.status();
  auto a = memory::Allocate(*(*client), 3 * kMiB, DeviceIndex(0));
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = memory::Allocate(*(*client), 8 * kMiB, DeviceIndex(0));
  ASSERT_TRUE(b.ok()) << b.status();
  char* last_page = static_cast<char*>(b->data()) + 6 * kMiB;  // [9, 11) MiB: b's alone
  EXPECT_EQ(Permissions(last_page).substr(0, 3), "rw-");
  ASSERT_TRUE(memory::Free(*(*client), std::move(*b)).ok());
  ASSERT_TRUE(memory::EmptyCache(*(*client)).ok());
  // [4, 12) MiB were wholly free: unmapped in the daemon, then here once the
  // session stream's notice arrived.
  EXPECT_EQ(DeviceStat(daemon.channel(), "reserved_bytes.all.current"),
            static_cast<int64_t>(4 * kMiB));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (Permissions(last_page).substr(0, 3) != "---" &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(Permissions(last_page).substr(0, 3), "---");
  // a's pages stay, and the segment grows again over fresh pages.
  FillPattern(a->data(), a->size(), 7);
  auto c = memory::Allocate(*(*client), 8 * kMiB, DeviceIndex(0));
  ASSERT_TRUE(c.ok()) << c.status();
  FillPattern(c->data(), c->size(), 8);
  std::vector<unsigned char> back(c->size());
  ASSERT_TRUE(copy::DeviceToHost(*(*client), back.data(), *c, 0, c->size()).ok());
  EXPECT_EQ(FirstPatternMismatch(back.data(), back.size(), 8), back.size());
  EXPECT_EQ(FirstPatternMismatch(a->data(), a->size(), 7), a->size());
}

TEST(CompactModeTest, SigkilledClientsPagesAreBackWithinOneSecond) {
  DaemonProcess daemon({"--host-devices=1", "--host-device-memory=2GiB", kCompact});
  Child holder({"hold", daemon.address(), std::to_string(uint64_t{1} << 30)});
  ASSERT_EQ(holder.ReadLine(), "ready");
  ASSERT_GE(DeviceStat(daemon.channel(), "reserved_bytes.all.current"), int64_t{1} << 30);
  kill(holder.pid(), SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  int64_t reserved = -1;
  while (std::chrono::steady_clock::now() - killed < std::chrono::seconds(1)) {
    reserved = DeviceStat(daemon.channel(), "reserved_bytes.all.current");
    if (reserved == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_EQ(reserved, 0);
  EXPECT_LT(ms, 1000.0);
  std::printf("compact_reclaimed_after_sigkill_ms=%.1f\n", ms);
  EXPECT_EQ(holder.Wait(), 128 + SIGKILL);
  // Its pages' memory went with it: the whole device can be had again.
  auto client = Client::Connect(daemon.address(), {.client_name = "after"});
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE(memory::Allocate(*(*client), uint64_t{2} << 30, DeviceIndex(0)).ok());
}

}  // namespace
}  // namespace gpumux::testing
