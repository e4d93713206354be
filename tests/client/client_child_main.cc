// A libgpumux client run as a separate process by the client tests.
//
//   gpumux_client_test_child wait-copy ADDRESS EVENT_HEX TOKEN SIZE SEED
//     imports the shared allocation TOKEN (SIZE bytes), opens the
//     interprocess event EVENT_HEX (Client::OpenEventIpcHandle) and prints
//     "pending" or "done" as it queries it; makes a stream wait on it and
//     queues a copy of the import into a buffer of its own there, printing
//     "queued"; then synchronizes the stream and prints "verified" when the
//     copy holds pattern SEED (exit 0), or what went wrong (exit 1).

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/escaping.h"
#include "gpumux/client.h"
#include "gpumux/copy.h"
#include "gpumux/copy_options.h"
#include "gpumux/memory.h"
#include "tests/support/test_pattern.h"

namespace {

using gpumux::DeviceIndex;

int Fail(const char* what, const absl::Status& status) {
  std::printf("%s: %s\n", what, status.ToString().c_str());
  return 1;
}

void Say(const char* line) {
  std::printf("%s\n", line);
  std::fflush(stdout);
}

int WaitCopy(char** argv) {
  auto client = gpumux::Client::Connect(argv[2], {.client_name = "event-child"});
  if (!client.ok()) return Fail("connect", client.status());
  gpumux::Client& c = **client;
  const uint64_t size = std::strtoull(argv[5], nullptr, 10);
  auto shared = gpumux::memory::Import(c, argv[4]);
  if (!shared.ok()) return Fail("import", shared.status());
  auto event = c.OpenEventIpcHandle(DeviceIndex(0), absl::HexStringToBytes(argv[3]));
  if (!event.ok()) return Fail("open event", event.status());
  auto done = event->Query();
  if (!done.ok()) return Fail("query", done.status());
  Say(*done ? "done" : "pending");
  auto stream = c.CreateStream(DeviceIndex(0));
  if (!stream.ok()) return Fail("stream", stream.status());
  if (auto status = stream->WaitEvent(*event); !status.ok()) return Fail("wait", status);
  auto own = gpumux::memory::Allocate(c, size, DeviceIndex(0));
  if (!own.ok()) return Fail("allocate", own.status());
  gpumux::CopyOptions options;
  options.stream = *stream;
  if (auto copied = gpumux::copy::DeviceToDevice(c, *own, 0, *shared, 0, size, options);
      !copied.ok()) {
    return Fail("copy", copied.status());
  }
  Say("queued");
  if (auto status = stream->Synchronize(); !status.ok()) return Fail("synchronize", status);
  std::string bytes(size, '\0');
  if (auto read = gpumux::copy::DeviceToHost(c, bytes.data(), *own, 0, size); !read.ok()) {
    return Fail("read", read.status());
  }
  const size_t mismatch = gpumux::testing::FirstPatternMismatch(
      bytes.data(), size, std::strtoull(argv[6], nullptr, 10));
  if (mismatch != size) {
    std::printf("MISMATCH at byte %zu\n", mismatch);
    return 1;
  }
  Say("verified");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 7 && std::string(argv[1]) == "wait-copy") return WaitCopy(argv);
  std::fprintf(stderr, "usage: see client_child_main.cc\n");
  return 2;
}
