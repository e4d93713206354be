// A libgpumux client run as a separate process by the cross-process tests.
//
//   gpumux_test_child producer ADDRESS SIZE SEED_A SEED_B
//     allocates SIZE shareable bytes, writes pattern A, prints the share token,
//     waits for a line on stdin, then checks the memory holds pattern B and
//     prints "verified" (exit 0) or where it differs (exit 1).
//   gpumux_test_child consumer ADDRESS TOKEN SIZE SEED_A SEED_B
//     imports the token, checks pattern A, writes pattern B; exit 0 if all held.
//   gpumux_test_child hold ADDRESS SIZE
//     allocates SIZE bytes, writes its first and last pages, prints "ready"
//     and the allocation's segment handle, then sleeps until killed.
//   gpumux_test_child session ADDRESS NAME TENANT POD SIZE
//     opens a session named NAME of TENANT ("-": none) labelled pod=POD, or
//     namespace=NS and pod=P for "NS/P" ("-": no label), allocates SIZE bytes
//     on device 0 and prints "ready ID" (its session id). Then, per stdin
//     line "call": allocates 4096 bytes and prints "ok", or "CODE: message"
//     when that fails; at the end of stdin it sleeps until killed.
//   gpumux_test_child event-wait ADDRESS HANDLE_HEX
//     maps the interprocess event into this process (its memory file comes
//     from the memory socket; the waiting needs no daemon), waits for its
//     latest record, prints "completed", exits 0.
//   gpumux_test_child event-make ADDRESS
//     creates an interprocess event on device 0, maps it and records it
//     itself, as a process recording its own work does, and prints its handle
//     in hex; completes it on the first stdin line (printing "completed"),
//     exits on the second.
//   gpumux_test_child tenant-churn ADDRESS TENANT ITERATIONS
//     opens a session of TENANT and allocates 12-24 MiB on device 0 and frees
//     it, ITERATIONS times; prints "refused N of M" (the allocations that were
//     RESOURCE_EXHAUSTED) and exits 0, or exits 1 on any other error.
//   gpumux_test_child cache ADDRESS BLOCK_MIB COUNT KEEP
//     allocates locally (AllocationMode::kLocal): three 100 KiB blocks on
//     device 0 (freeing the middle one, so a small lease is split), then
//     COUNT blocks of BLOCK_MIB MiB, of which it frees all but the first
//     KEEP (the rest stays cached in its leases); prints "ready". Then, per
//     stdin line: "stats" prints "reserved R allocated A" (its own view);
//     "snapshot" prints one line per lease, "ADDRESS BLOCK..." with each
//     block as ADDRESS:SIZE:REQUESTED:STATE, sorted by address; "exit" or
//     the end of stdin exits 0.
//   gpumux_test_child replay ADDRESS TRACE CHECKPOINTS
//     replays TRACE through a local-allocating client on device 0, pausing
//     CHECKPOINTS times at evenly spaced quiescent points (between two
//     operations) and once at the end: each time it prints its session id
//     and its own memory_stats as "ID KEY=VALUE ..." and waits for a stdin
//     line. Exits 0 after the last.

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "gpumux/client.h"
#include "gpumux/common/host_ipc_event.h"
#include "gpumux/memory.h"
#include "gpumux/memory_snapshot.h"
#include "replay/client_target.h"
#include "replay/trace_replay.h"
#include "tests/support/test_pattern.h"

namespace {

using gpumux::testing::FillPattern;
using gpumux::testing::FirstPatternMismatch;

uint64_t Arg(const char* text) { return std::strtoull(text, nullptr, 10); }

int Fail(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "%s: %s\n", what, status.ToString().c_str());
  return 1;
}

int Producer(char** argv) {
  auto client = gpumux::Client::Connect(argv[2], {.client_name = "producer"});
  if (!client.ok()) return Fail("connect", client.status());
  uint64_t size = Arg(argv[3]);
  auto buffer =
      gpumux::memory::Allocate(*(*client), size, gpumux::DeviceIndex(1), {.shareable = true});
  if (!buffer.ok()) return Fail("allocate", buffer.status());
  FillPattern(buffer->data(), size, Arg(argv[4]));
  auto token = gpumux::memory::Share(*(*client), *buffer);
  if (!token.ok()) return Fail("share", token.status());
  std::printf("%s\n", token->c_str());
  std::fflush(stdout);
  char line[64];
  if (std::fgets(line, sizeof(line), stdin) == nullptr) return 1;
  size_t mismatch = FirstPatternMismatch(buffer->data(), size, Arg(argv[5]));
  if (mismatch != size) {
    std::printf("MISMATCH at byte %zu\n", mismatch);
    return 1;
  }
  std::printf("verified\n");
  return 0;
}

int Consumer(char** argv) {
  auto client = gpumux::Client::Connect(argv[2], {.client_name = "consumer"});
  if (!client.ok()) return Fail("connect", client.status());
  auto buffer = gpumux::memory::Import(*(*client), argv[3]);
  if (!buffer.ok()) return Fail("import", buffer.status());
  uint64_t size = Arg(argv[4]);
  if (buffer->size() != size) {
    std::fprintf(stderr, "imported %llu bytes, expected %llu\n",
                 static_cast<unsigned long long>(buffer->size()),
                 static_cast<unsigned long long>(size));
    return 1;
  }
  size_t mismatch = FirstPatternMismatch(buffer->data(), size, Arg(argv[5]));
  if (mismatch != size) {
    std::fprintf(stderr, "consumer read a mismatch at byte %zu\n", mismatch);
    return 1;
  }
  FillPattern(buffer->data(), size, Arg(argv[6]));
  return 0;
}

int Hold(char** argv) {
  auto client = gpumux::Client::Connect(argv[2], {.client_name = "holder"});
  if (!client.ok()) return Fail("connect", client.status());
  uint64_t size = Arg(argv[3]);
  auto buffer = gpumux::memory::Allocate(*(*client), size, gpumux::DeviceIndex(0));
  if (!buffer.ok()) return Fail("allocate", buffer.status());
  auto* bytes = static_cast<unsigned char*>(buffer->data());
  std::memset(bytes, 0xab, 4096);
  std::memset(bytes + size - 4096, 0xcd, 4096);
  std::printf("ready\n");
  std::fflush(stdout);
  for (;;) pause();
}

int NamedSession(char** argv) {
  gpumux::ClientOptions options{.client_name = argv[3]};
  if (std::strcmp(argv[4], "-") != 0) options.tenant = argv[4];
  const std::string pod = argv[5];
  if (pod != "-") {
    const size_t slash = pod.find('/');
    if (slash == std::string::npos) {
      options.labels["pod"] = pod;
    } else {
      options.labels["namespace"] = pod.substr(0, slash);
      options.labels["pod"] = pod.substr(slash + 1);
    }
  }
  auto client = gpumux::Client::Connect(argv[2], options);
  if (!client.ok()) return Fail("connect", client.status());
  auto buffer = gpumux::memory::Allocate(*(*client), Arg(argv[6]), gpumux::DeviceIndex(0));
  if (!buffer.ok()) return Fail("allocate", buffer.status());
  std::printf("ready %llu\n", static_cast<unsigned long long>((*client)->session_id().value()));
  std::fflush(stdout);
  std::vector<gpumux::DeviceBuffer> more;
  char line[64];
  while (std::fgets(line, sizeof(line), stdin) != nullptr) {
    auto next = gpumux::memory::Allocate(*(*client), 4096, gpumux::DeviceIndex(0));
    if (next.ok()) {
      more.push_back(*std::move(next));
      std::printf("ok\n");
    } else {
      std::printf("%s: %s\n", absl::StatusCodeToString(next.status().code()).c_str(),
                  std::string(next.status().message()).c_str());
    }
    std::fflush(stdout);
  }
  for (;;) pause();
}

int EventWait(char** argv) {
  auto client = gpumux::Client::Connect(argv[2]);
  if (!client.ok()) return Fail("connect", client.status());
  auto event = (*client)->MapIpcEvent(absl::HexStringToBytes(argv[3]));
  if (!event.ok()) return Fail("map event", event.status());
  (*event)->Wait((*event)->recorded());
  std::printf("completed\n");
  return 0;
}

int EventMake(char** argv) {
  auto client = gpumux::Client::Connect(argv[2]);
  if (!client.ok()) return Fail("connect", client.status());
  gpumux::EventOptions interprocess;
  interprocess.interprocess = true;
  auto created = (*client)->CreateEvent(gpumux::DeviceIndex(0), interprocess);
  if (!created.ok()) return Fail("create event", created.status());
  auto handle = created->IpcHandle();
  if (!handle.ok()) return Fail("event handle", handle.status());
  auto event = (*client)->MapIpcEvent(*handle);
  if (!event.ok()) return Fail("map event", event.status());
  uint64_t generation = (*event)->Record();
  std::printf("%s\n", absl::BytesToHexString(*handle).c_str());
  std::fflush(stdout);
  char line[64];
  if (std::fgets(line, sizeof(line), stdin) == nullptr) return 1;
  (*event)->Complete(generation, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
  std::printf("completed\n");
  std::fflush(stdout);
  if (std::fgets(line, sizeof(line), stdin) == nullptr) return 1;
  return 0;
}

int TenantChurn(char** argv) {
  auto client = gpumux::Client::Connect(argv[2], {.client_name = "churn", .tenant = argv[3]});
  if (!client.ok()) return Fail("connect", client.status());
  const uint64_t iterations = Arg(argv[4]);
  uint64_t refused = 0;
  for (uint64_t i = 0; i < iterations; ++i) {
    const uint64_t size = (12 + 2 * ((i + static_cast<uint64_t>(getpid())) % 7)) << 20;
    auto buffer = gpumux::memory::Allocate(*(*client), size, gpumux::DeviceIndex(0));
    if (absl::IsResourceExhausted(buffer.status())) {
      ++refused;
      continue;
    }
    if (!buffer.ok()) return Fail("allocate", buffer.status());
    // Touch it, so the memory is really there; dropping it frees it.
    static_cast<char*>(buffer->data())[0] = 1;
  }
  std::printf("refused %llu of %llu\n", static_cast<unsigned long long>(refused),
              static_cast<unsigned long long>(iterations));
  return 0;
}

int Cache(char** argv) {
  auto client = gpumux::Client::Connect(
      argv[2], {.client_name = "cache", .allocation = gpumux::AllocationMode::kLocal});
  if (!client.ok()) return Fail("connect", client.status());
  const gpumux::DeviceIndex device(0);
  std::vector<gpumux::DeviceBuffer> kept;
  for (int i = 0; i < 3; ++i) {
    auto small = gpumux::memory::Allocate(*(*client), 100 << 10, device);
    if (!small.ok()) return Fail("allocate", small.status());
    if (i != 1) kept.push_back(*std::move(small));
  }
  const uint64_t count = Arg(argv[4]), keep = Arg(argv[5]);
  std::vector<gpumux::DeviceBuffer> blocks;
  for (uint64_t i = 0; i < count; ++i) {
    auto buffer = gpumux::memory::Allocate(*(*client), Arg(argv[3]) << 20, device);
    if (!buffer.ok()) return Fail("allocate", buffer.status());
    blocks.push_back(*std::move(buffer));
  }
  for (uint64_t i = 0; i < keep && i < count; ++i) kept.push_back(std::move(blocks[i]));
  blocks.clear();  // frees the rest: cached
  std::printf("ready\n");
  std::fflush(stdout);
  char line[64];
  while (std::fgets(line, sizeof(line), stdin) != nullptr) {
    const std::string command(line, std::strcspn(line, "\n"));
    if (command == "stats") {
      auto stats = gpumux::memory::MemoryStats(*(*client), device);
      if (!stats.ok()) return Fail("stats", stats.status());
      std::printf("reserved %lld allocated %lld\n",
                  static_cast<long long>(stats->at("reserved_bytes.all.current")),
                  static_cast<long long>(stats->at("allocated_bytes.all.current")));
    } else if (command == "snapshot") {
      auto segments = gpumux::memory::MemorySnapshot(*(*client), device);
      if (!segments.ok()) return Fail("snapshot", segments.status());
      for (const gpumux::SegmentInfo& segment : *segments) {
        if (!segment.leased) continue;
        std::string out = std::to_string(segment.address);
        for (const gpumux::BlockInfo& block : segment.blocks) {
          out += " " + std::to_string(block.address) + ":" + std::to_string(block.size) + ":" +
                 std::to_string(block.requested_size) + ":" + block.state;
        }
        std::printf("%s\n", out.c_str());
      }
      std::printf("end\n");
    } else if (command == "exit") {
      break;
    }
    std::fflush(stdout);
  }
  return 0;
}

// Forwards to a ClientReplayTarget and calls `pause` after every `every`
// operations.
class PausingTarget final : public gpumux::ReplayTarget {
 public:
  PausingTarget(gpumux::ReplayTarget& inner, uint64_t every, std::function<void()> pause)
      : inner_(inner), every_(every), pause_(std::move(pause)) {}
  absl::StatusOr<uint64_t> Allocate(uint64_t size, uint64_t stream) override {
    absl::StatusOr<uint64_t> handle = inner_.Allocate(size, stream);
    Count();
    return handle;
  }
  absl::Status Free(uint64_t handle) override {
    absl::Status status = inner_.Free(handle);
    Count();
    return status;
  }
  absl::StatusOr<std::map<std::string, int64_t>> Stats() override { return inner_.Stats(); }

 private:
  void Count() {
    if (++operations_ % every_ == 0) pause_();
  }
  gpumux::ReplayTarget& inner_;
  const uint64_t every_;
  const std::function<void()> pause_;
  uint64_t operations_ = 0;
};

int ReplayWithPauses(char** argv) {
  auto client = gpumux::Client::Connect(
      argv[2], {.client_name = "replay", .allocation = gpumux::AllocationMode::kLocal});
  if (!client.ok()) return Fail("connect", client.status());
  auto events = gpumux::LoadTrace(argv[3]);
  if (!events.ok()) return Fail("trace", events.status());
  const gpumux::DeviceIndex device(0);
  bool failed = false;
  auto pause = [&] {
    auto stats = gpumux::memory::MemoryStats(*(*client), device);
    if (!stats.ok()) {
      Fail("stats", stats.status());
      failed = true;
      return;
    }
    std::string line = std::to_string((*client)->session_id().value());
    for (const auto& [key, value] : *stats) line += " " + key + "=" + std::to_string(value);
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    char answer[16];
    if (std::fgets(answer, sizeof(answer), stdin) == nullptr) failed = true;
  };
  gpumux::ClientReplayTarget inner(**client, device);
  PausingTarget target(inner, events->size() / (Arg(argv[4]) + 1) + 1, pause);
  auto result = gpumux::Replay(*events, target);
  if (!result.ok()) return Fail("replay", result.status());
  if (failed) return 1;
  pause();  // the end
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 6 && std::strcmp(argv[1], "producer") == 0) return Producer(argv);
  if (argc >= 7 && std::strcmp(argv[1], "consumer") == 0) return Consumer(argv);
  if (argc >= 4 && std::strcmp(argv[1], "hold") == 0) return Hold(argv);
  if (argc >= 7 && std::strcmp(argv[1], "session") == 0) return NamedSession(argv);
  if (argc >= 4 && std::strcmp(argv[1], "event-wait") == 0) return EventWait(argv);
  if (argc >= 3 && std::strcmp(argv[1], "event-make") == 0) return EventMake(argv);
  if (argc >= 5 && std::strcmp(argv[1], "tenant-churn") == 0) return TenantChurn(argv);
  if (argc >= 6 && std::strcmp(argv[1], "cache") == 0) return Cache(argv);
  if (argc >= 5 && std::strcmp(argv[1], "replay") == 0) return ReplayWithPauses(argv);
  std::fprintf(stderr, "usage: see the header of tests/cross_process/child_main.cc\n");
  return 2;
}
