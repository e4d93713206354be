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

#include "client/client.h"
#include "gpumux/v1/observe.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/support/raw_session.h"
#include "tests/support/test_pattern.h"

namespace gpumux::testing {
namespace {

const std::string kChild = std::string(GPUMUX_BINARY_DIR) + "/tests/cross_process/gpumux_test_child";

// A child process with pipes to its stdin and stdout.
class Child {
 public:
  explicit Child(std::vector<std::string> args) {
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) ADD_FAILURE() << "pipe";
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      close(in[1]);
      close(out[0]);
      std::vector<char*> argv;
      args.insert(args.begin(), kChild);
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    to_child_ = fdopen(in[1], "w");
    from_child_ = fdopen(out[0], "r");
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      Wait();
    }
    if (to_child_ != nullptr) fclose(to_child_);
    if (from_child_ != nullptr) fclose(from_child_);
  }
  std::string ReadLine() {
    char line[512];
    if (std::fgets(line, sizeof(line), from_child_) == nullptr) return "";
    std::string s(line);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  void WriteLine(const std::string& line) {
    std::fprintf(to_child_, "%s\n", line.c_str());
    std::fflush(to_child_);
  }
  // The exit code, or 128 + signal.
  int Wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  FILE* to_child_ = nullptr;
  FILE* from_child_ = nullptr;
};

int64_t DeviceStat(const std::shared_ptr<grpc::Channel>& channel, int device, const std::string& key) {
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
  auto kept = (*bystander)->Allocate(3 << 20, DeviceIndex(0));
  ASSERT_TRUE(kept.ok()) << kept.status();
  FillPattern(kept->data(), kept->size(), 99);
  const int64_t bystander_reserved = DeviceStat(daemon.channel(), 0, "reserved_bytes.all.current");

  Child holder({"hold", daemon.address(), std::to_string(uint64_t{1} << 30)});
  ASSERT_EQ(holder.ReadLine(), "ready");
  ASSERT_GE(DeviceStat(daemon.channel(), 0, "allocated_bytes.all.current"), (int64_t{1} << 30) + (3 << 20));

  kill(holder.pid(), SIGKILL);
  auto killed = std::chrono::steady_clock::now();
  int64_t allocated = 0, reserved = 0;
  while (std::chrono::steady_clock::now() - killed < std::chrono::seconds(1)) {
    allocated = DeviceStat(daemon.channel(), 0, "allocated_bytes.all.current");
    reserved = DeviceStat(daemon.channel(), 0, "reserved_bytes.all.current");
    if (allocated == (3 << 20) && reserved == bystander_reserved) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_EQ(allocated, 3 << 20);
  EXPECT_EQ(reserved, bystander_reserved);
  EXPECT_LT(ms, 1000.0);
  std::printf("reclaimed_after_sigkill_ms=%.1f\n", ms);
  EXPECT_EQ(holder.Wait(), 128 + SIGKILL);

  // The bystander is untouched and keeps working.
  EXPECT_EQ(FirstPatternMismatch(kept->data(), kept->size(), 99), kept->size());
  auto more = (*bystander)->Allocate(64 << 20, DeviceIndex(0));
  EXPECT_TRUE(more.ok()) << more.status();
  EXPECT_EQ(*(*bystander)->MemoryAllocated(DeviceIndex(0)), (3 << 20) + (64 << 20));
}

}  // namespace
}  // namespace gpumux::testing
