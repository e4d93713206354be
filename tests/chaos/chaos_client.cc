// gpumux_chaos_client ADDRESS SEED: one client of the chaos test. It opens a
// session, prints "ready", then runs a random mix of every kind of operation
// libgpumux offers (allocations of many sizes on both devices, frees, shares
// and imports of its own tokens, streams and events created and destroyed,
// interprocess handles, record_stream, copies inline and through the staging
// buffer, memsets, random fills, NVTX ranges, synchronizes, stats) until it
// is SIGKILLed. Errors are expected (limits, out of memory) and ignored: the
// test judges the daemon, not this process.

#include <cstdio>
#include <cstdlib>
#include <deque>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gpumux/client.h"
#include "gpumux/copy.h"
#include "gpumux/copy_options.h"
#include "gpumux/device_buffer.h"
#include "gpumux/memory.h"
#include "gpumux/nvtx.h"
#include "gpumux/random.h"
#include "gpumux/random_options.h"

namespace {

using gpumux::Client;
using gpumux::DeviceBuffer;
using gpumux::DeviceIndex;

int Run(const char* address, uint64_t seed) {
  gpumux::ClientOptions options;
  options.client_name = "chaos";
  options.free_batch_delay = absl::Microseconds(200);
  absl::StatusOr<std::unique_ptr<Client>> connected = Client::Connect(address, options);
  if (!connected.ok()) {
    std::fprintf(stderr, "chaos client: %s\n", connected.status().ToString().c_str());
    return 1;
  }
  Client& client = **connected;
  std::printf("ready\n");
  std::fflush(stdout);

  std::mt19937_64 rng(seed);
  auto pick = [&](uint64_t n) { return static_cast<uint64_t>(rng() % n); };
  std::deque<DeviceBuffer> buffers;
  std::deque<gpumux::Stream> streams;
  std::deque<gpumux::Event> events;
  std::vector<char> host(4 << 20);
  int depth = 0;
  const uint64_t sizes[] = {512, 4096, 1 << 20, 3 << 20, 12 << 20};
  while (true) {
    const DeviceIndex device(static_cast<int32_t>(pick(2)));
    DeviceBuffer* buffer = buffers.empty() ? nullptr : &buffers[pick(buffers.size())];
    switch (pick(16)) {
      case 0:
      case 1:
      case 2: {
        gpumux::AllocateOptions allocate;
        allocate.shareable = pick(8) == 0;
        if (!streams.empty() && pick(4) == 0 && streams.front().device() == device)
          allocate.stream = streams.front();
        absl::StatusOr<DeviceBuffer> b =
            gpumux::memory::Allocate(client, sizes[pick(5)] + pick(512), device, allocate);
        if (b.ok()) buffers.push_back(std::move(*b));
        break;
      }
      case 3:
      case 4:
        if (!buffers.empty())
          buffers.erase(buffers.begin() + static_cast<long>(pick(buffers.size())));
        break;
      case 5:
        if (buffer != nullptr) {
          absl::StatusOr<std::string> token = gpumux::memory::Share(client, *buffer);
          if (token.ok() && pick(2) == 0) {
            absl::StatusOr<DeviceBuffer> imported = gpumux::memory::Import(client, *token);
            if (imported.ok()) buffers.push_back(std::move(*imported));
          }
        }
        break;
      case 6:
        if (streams.size() < 8) {
          absl::StatusOr<gpumux::Stream> s =
              client.CreateStream(device, -static_cast<int>(pick(6)));
          if (s.ok()) streams.push_back(*s);
        } else {
          (void)client.DestroyStream(streams.front());
          streams.pop_front();
        }
        break;
      case 7: {
        gpumux::EventOptions flags;
        flags.interprocess = pick(2) == 0;
        flags.enable_timing = !flags.interprocess && pick(2) == 0;
        gpumux::Event event(client, flags);
        if (!streams.empty()) {
          (void)event.Record(streams[pick(streams.size())]);
        } else {
          (void)event.Record();
        }
        if (flags.interprocess) {
          absl::StatusOr<std::string> handle = event.IpcHandle();
          if (handle.ok()) {
            absl::StatusOr<gpumux::Event> opened = client.OpenEventIpcHandle(device, *handle);
            if (opened.ok()) (void)opened->Query();
          }
        }
        events.push_back(std::move(event));
        if (events.size() > 16) events.pop_front();
        break;
      }
      case 8:
        if (buffer != nullptr && !streams.empty()) {
          const gpumux::Stream& s = streams[pick(streams.size())];
          if (s.device() == buffer->device())
            (void)gpumux::memory::RecordStream(client, *buffer, s);
        }
        break;
      case 9:
      case 10:
        if (buffer != nullptr) {
          gpumux::CopyOptions copy;
          copy.wait = pick(2) == 0;
          const uint64_t n = std::min<uint64_t>(buffer->size(), pick(2) == 0 ? 4096 : host.size());
          (void)gpumux::copy::HostToDevice(client, *buffer, 0, host.data(), n, copy);
          if (pick(2) == 0) (void)gpumux::copy::DeviceToHost(client, host.data(), *buffer, 0, n);
        }
        break;
      case 11:
        if (buffer != nullptr) {
          gpumux::CopyOptions copy;
          if (!streams.empty() && streams.back().device() == buffer->device())
            copy.stream = streams.back();
          (void)gpumux::copy::Memset(client, *buffer, 0, static_cast<uint8_t>(pick(256)),
                                     buffer->size(), copy);
        }
        break;
      case 12:
        if (buffer != nullptr && buffers.size() > 1) {
          const DeviceBuffer& other = buffers[pick(buffers.size())];
          (void)gpumux::copy::DeviceToDevice(client, *buffer, 0, other, 0,
                                             std::min(buffer->size(), other.size()));
        }
        break;
      case 13:
        if (buffer != nullptr) {
          (void)gpumux::random::Generate(client, *buffer, 0, gpumux::Dtype::kFloat32,
                                         buffer->size() / 4, gpumux::Normal{0, 1});
        }
        break;
      case 14:
        if (depth < 8 && pick(2) == 0) {
          if (gpumux::nvtx::RangePush(client, "chaos").ok()) ++depth;
        } else if (depth > 0 && gpumux::nvtx::RangePop(client).ok()) {
          --depth;
        }
        break;
      case 15:
        if (pick(4) == 0) {
          (void)client.Synchronize(device);
        } else {
          (void)gpumux::memory::MemoryStats(client, device);
        }
        break;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: gpumux_chaos_client ADDRESS SEED\n");
    return 2;
  }
  return Run(argv[1], std::strtoull(argv[2], nullptr, 10));
}
