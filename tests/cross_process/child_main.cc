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

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/escaping.h"
#include "client/client.h"
#include "common/host_ipc_event.h"
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
  auto buffer = (*client)->Allocate(size, gpumux::DeviceIndex(1), {.shareable = true});
  if (!buffer.ok()) return Fail("allocate", buffer.status());
  FillPattern(buffer->data(), size, Arg(argv[4]));
  auto token = (*client)->Share(*buffer);
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
  auto buffer = (*client)->Import(argv[3]);
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
  auto buffer = (*client)->Allocate(size, gpumux::DeviceIndex(0));
  if (!buffer.ok()) return Fail("allocate", buffer.status());
  auto* bytes = static_cast<unsigned char*>(buffer->data());
  std::memset(bytes, 0xab, 4096);
  std::memset(bytes + size - 4096, 0xcd, 4096);
  std::printf("ready\n");
  std::fflush(stdout);
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
    auto buffer = (*client)->Allocate(size, gpumux::DeviceIndex(0));
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

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 6 && std::strcmp(argv[1], "producer") == 0) return Producer(argv);
  if (argc >= 7 && std::strcmp(argv[1], "consumer") == 0) return Consumer(argv);
  if (argc >= 4 && std::strcmp(argv[1], "hold") == 0) return Hold(argv);
  if (argc >= 4 && std::strcmp(argv[1], "event-wait") == 0) return EventWait(argv);
  if (argc >= 3 && std::strcmp(argv[1], "event-make") == 0) return EventMake(argv);
  if (argc >= 5 && std::strcmp(argv[1], "tenant-churn") == 0) return TenantChurn(argv);
  std::fprintf(stderr, "usage: see the header of tests/cross_process/child_main.cc\n");
  return 2;
}
