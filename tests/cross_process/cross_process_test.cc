// Real processes against a real gpumuxd: sharing memory between two client
// processes, and a SIGKILLed client's memory coming back within a second.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "gpumux/client.h"
#include "gpumux/memory.h"
#include "gpumux/v1/observe.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/cross_process/child_process.h"
#include "tests/support/raw_session.h"
#include "tests/support/test_pattern.h"

namespace gpumux::testing {
namespace {

int64_t DeviceStat(const std::shared_ptr<grpc::Channel>& channel, int device,
                   const std::string& key) {
  auto observe = v1::Observe::NewStub(channel);
  v1::ObserveStatsRequest request;
  request.set_device(device);
  v1::MemoryStats stats;
  grpc::ClientContext context;
  grpc::Status status = observe->GetMemoryStats(&context, request, &stats);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return stats.values().at(key);
}

TEST(CrossProcessTest, TwoProcessesShareMemoryThroughTheDaemon) {
  DaemonProcess daemon({"--host-devices=2", "--host-device-memory=1GiB"});
  const std::string size = std::to_string(7 * 1024 * 1024 + 333);  // unaligned on purpose
  const std::string seed_a = "1234567", seed_b = "7654321";
  Child producer({"producer", daemon.address(), size, seed_a, seed_b});
  std::string token = producer.ReadLine();
  ASSERT_EQ(token.rfind("gpumux-share-", 0), 0u) << token;

  Child consumer({"consumer", daemon.address(), token, size, seed_a, seed_b});
  ASSERT_EQ(consumer.Wait(), 0) << "the consumer did not read the producer's bytes exactly";

  producer.WriteLine("check");
  EXPECT_EQ(producer.ReadLine(), "verified");
  EXPECT_EQ(producer.Wait(), 0);
  // Both gone: nothing left on the device.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (DeviceStat(daemon.channel(), 1, "reserved_bytes.all.current") != 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(DeviceStat(daemon.channel(), 1, "reserved_bytes.all.current"), 0);
}

TEST(CrossProcessTest, SigkilledClientsMemoryIsBackWithinOneSecond) {
  DaemonProcess daemon({"--host-devices=2", "--host-device-memory=4GiB"});
  // A bystander session with live data.
  auto bystander = Client::Connect(daemon.address(), {.client_name = "bystander"});
  ASSERT_TRUE(bystander.ok()) << bystander.status();
  auto kept = memory::Allocate(*(*bystander), 3 << 20, DeviceIndex(0));
  ASSERT_TRUE(kept.ok()) << kept.status();
  FillPattern(kept->data(), kept->size(), 99);
  const int64_t bystander_reserved = DeviceStat(daemon.channel(), 0, "reserved_bytes.all.current");

  Child holder({"hold", daemon.address(), std::to_string(uint64_t{1} << 30)});
  ASSERT_EQ(holder.ReadLine(), "ready");
  ASSERT_GE(DeviceStat(daemon.channel(), 0, "allocated_bytes.all.current"),
            (int64_t{1} << 30) + (3 << 20));

  kill(holder.pid(), SIGKILL);
  auto killed = std::chrono::steady_clock::now();
  int64_t allocated = 0, reserved = 0;
  while (std::chrono::steady_clock::now() - killed < std::chrono::seconds(1)) {
    allocated = DeviceStat(daemon.channel(), 0, "allocated_bytes.all.current");
    reserved = DeviceStat(daemon.channel(), 0, "reserved_bytes.all.current");
    if (allocated == (3 << 20) && reserved == bystander_reserved) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_EQ(allocated, 3 << 20);
  EXPECT_EQ(reserved, bystander_reserved);
  EXPECT_LT(ms, 1000.0);
  std::printf("reclaimed_after_sigkill_ms=%.1f\n", ms);
  EXPECT_EQ(holder.Wait(), 128 + SIGKILL);

  // The bystander is untouched and keeps working.
  EXPECT_EQ(FirstPatternMismatch(kept->data(), kept->size(), 99), kept->size());
  auto more = memory::Allocate(*(*bystander), 64 << 20, DeviceIndex(0));
  EXPECT_TRUE(more.ok()) << more.status();
  EXPECT_EQ(*memory::MemoryAllocated(*(*bystander), DeviceIndex(0)), (3 << 20) + (64 << 20));
}

}  // namespace
}  // namespace gpumux::testing
