// A libgpumux program of a known shape, for `gpumux bottleneck` and `gpumux
// profile` tests (it knows nothing of profiling: the environment turns it on).
//
//   gpumux_bottleneck_target alloc   1000 allocations of 4 KiB (each freed
//                                    when dropped), one 64 MiB host-to-device
//                                    copy, a synchronize: host-bound
//   gpumux_bottleneck_target wait    20 memsets of 512 MiB, each waited for
//                                    (Stream::Synchronize): device-bound
//   gpumux_bottleneck_target crash   5 allocations inside an NVTX range, a
//                                    memset, then abort()
//   gpumux_bottleneck_target serve   allocates 16 MiB, prints "session N",
//                                    then memsets and synchronizes for 60 s
//                                    (for attach)
//
// The daemon is $GPUMUX_ADDRESS's. Exit 0 when done, 1 on a failed call.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gpumux/client.h"
#include "gpumux/copy.h"
#include "gpumux/device_buffer.h"
#include "gpumux/memory.h"
#include "gpumux/nvtx.h"

namespace {

using gpumux::DeviceIndex;

int Fail(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "bottleneck_target: %s: %s\n", what, status.ToString().c_str());
  return 1;
}

int Alloc(gpumux::Client& client) {
  for (int i = 0; i < 1000; ++i) {
    absl::StatusOr<gpumux::DeviceBuffer> buffer = gpumux::memory::Allocate(client, 4096);
    if (!buffer.ok()) return Fail("allocate", buffer.status());
  }
  const uint64_t bytes = uint64_t{64} << 20;
  std::vector<char> host(bytes, 7);
  absl::StatusOr<gpumux::DeviceBuffer> big = gpumux::memory::Allocate(client, bytes);
  if (!big.ok()) return Fail("allocate", big.status());
  if (auto copied = gpumux::copy::HostToDevice(client, *big, 0, host.data(), bytes); !copied.ok()) {
    return Fail("copy", copied.status());
  }
  if (absl::Status synced = client.CurrentStream(DeviceIndex(0)).Synchronize(); !synced.ok()) {
    return Fail("synchronize", synced);
  }
  return 0;
}

int MemsetAndWait(gpumux::Client& client, const gpumux::DeviceBuffer& buffer, int round) {
  if (auto set =
          gpumux::copy::Memset(client, buffer, 0, static_cast<uint8_t>(round), buffer.size());
      !set.ok()) {
    return Fail("memset", set.status());
  }
  if (absl::Status synced = client.CurrentStream(DeviceIndex(0)).Synchronize(); !synced.ok()) {
    return Fail("synchronize", synced);
  }
  return 0;
}

int Wait(gpumux::Client& client) {
  absl::StatusOr<gpumux::DeviceBuffer> buffer =
      gpumux::memory::Allocate(client, uint64_t{512} << 20);
  if (!buffer.ok()) return Fail("allocate", buffer.status());
  for (int i = 0; i < 20; ++i) {
    if (int failed = MemsetAndWait(client, *buffer, i); failed != 0) return failed;
  }
  return 0;
}

int Crash(gpumux::Client& client) {
  gpumux::nvtx::Range range(client, "before the crash");
  std::vector<gpumux::DeviceBuffer> kept;
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<gpumux::DeviceBuffer> buffer = gpumux::memory::Allocate(client, 1 << 20);
    if (!buffer.ok()) return Fail("allocate", buffer.status());
    kept.push_back(*std::move(buffer));
  }
  if (auto set = gpumux::copy::Memset(client, kept[0], 0, 1, 1 << 20); !set.ok())
    return Fail("memset", set.status());
  if (absl::Status synced = client.CurrentStream(DeviceIndex(0)).Synchronize(); !synced.ok()) {
    return Fail("synchronize", synced);
  }
  std::fflush(stdout);
  std::abort();
}

int Serve(gpumux::Client& client) {
  absl::StatusOr<gpumux::DeviceBuffer> buffer =
      gpumux::memory::Allocate(client, uint64_t{16} << 20);
  if (!buffer.ok()) return Fail("allocate", buffer.status());
  std::printf("session %llu\n", static_cast<unsigned long long>(client.session_id().value()));
  std::fflush(stdout);
  const absl::Time end = absl::Now() + absl::Seconds(60);
  for (int round = 0; absl::Now() < end; ++round) {
    if (int failed = MemsetAndWait(client, *buffer, round); failed != 0) return failed;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc == 2 ? argv[1] : "";
  if (mode != "alloc" && mode != "wait" && mode != "crash" && mode != "serve") {
    std::fprintf(stderr, "usage: gpumux_bottleneck_target alloc|wait|crash|serve\n");
    return 2;
  }
  absl::StatusOr<std::unique_ptr<gpumux::Client>> client =
      gpumux::Client::Connect(gpumux::DefaultAddress(), {.client_name = "bottleneck-target"});
  if (!client.ok()) return Fail("connect", client.status());
  if (mode == "alloc") return Alloc(**client);
  if (mode == "wait") return Wait(**client);
  if (mode == "crash") return Crash(**client);
  return Serve(**client);
}
