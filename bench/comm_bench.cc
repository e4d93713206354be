// torch.cuda.comm within a node through a real gpumuxd (host backend, two
// emulated devices), side by side with a plain memcpy of the same bytes in
// the same process and run:
//   - broadcast of S bytes (float32) from device 0 to device 1 into an `out`
//     tensor, waited: one copy of S bytes;
//   - reduce_add of two S-byte tensors onto device 0, waited: a copy of S
//     bytes and an element-wise sum reading 2S and writing S;
// as throughput (S / median time) and as ratios to memcpy's S / time.
// Rounds interleave the kinds so machine noise hits them alike.
//
// usage: gpumux_comm_bench [--gpumuxd PATH] [--size BYTES] [--rounds R]
// Starts gpumuxd (host backend, 2 devices of 4 size) on a temporary socket.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_daemon.h"
#include "bench/bench_flags.h"
#include "gpumux/client.h"
#include "gpumux/comm.h"
#include "gpumux/comm_types.h"
#include "gpumux/device_buffer.h"
#include "gpumux/memory.h"
#include "gpumux/random.h"
#include "gpumux/random_options.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  std::string gpumuxd;
  uint64_t size = uint64_t{64} << 20;
  int rounds = 7;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename Body>
double Seconds(Body body) {
  const Clock::time_point start = Clock::now();
  body();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "gpumux_comm_bench: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  absl::Status parsed =
      gpumux::bench::ParseBenchFlags(argc, argv,
                                     {{"gpumuxd", &flags.gpumuxd},
                                      {"rounds", &flags.rounds},
                                      {"size", &flags.size, 4, int64_t{1} << 34}});
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s\nusage: %s [--gpumuxd PATH] [--size BYTES] [--rounds R]\n",
                 std::string(parsed.message()).c_str(), argv[0]);
    return 2;
  }
  flags.size -= flags.size % 4;
  gpumux::bench::BenchDaemon daemon(
      flags.gpumuxd.empty() ? gpumux::bench::DefaultDaemonPath() : flags.gpumuxd,
      {"--host-devices=2", absl::StrCat("--host-device-memory=", 4 * flags.size + (64 << 20))});
  auto connected = gpumux::Client::Connect(daemon.address(), {.client_name = "gpumux_comm_bench"});
  if (!connected.ok()) return Fail(connected.status());
  gpumux::Client& client = **connected;
  using gpumux::DeviceIndex;
  auto a = gpumux::memory::Allocate(client, flags.size, DeviceIndex(0));
  auto b = gpumux::memory::Allocate(client, flags.size, DeviceIndex(1));
  auto out = gpumux::memory::Allocate(client, flags.size, DeviceIndex(1));
  if (!a.ok() || !b.ok() || !out.ok())
    return Fail(!a.ok() ? a.status() : !b.ok() ? b.status() : out.status());
  const auto elements = static_cast<int64_t>(flags.size / 4);
  for (gpumux::DeviceBuffer* buffer : {&*a, &*b}) {
    if (absl::Status s =
            gpumux::random::Generate(client, *buffer, 0, gpumux::Dtype::kFloat32,
                                     static_cast<uint64_t>(elements), gpumux::Uniform{-1, 1})
                .status();
        !s.ok()) {
      return Fail(s);
    }
  }
  const gpumux::TensorRef ta{&*a, 0, gpumux::Dtype::kFloat32, {elements}, DeviceIndex(0)};
  const gpumux::TensorRef tb{&*b, 0, gpumux::Dtype::kFloat32, {elements}, DeviceIndex(1)};
  const gpumux::TensorRef tout{&*out, 0, gpumux::Dtype::kFloat32, {elements}, DeviceIndex(1)};
  gpumux::CollectiveOptions waited;
  waited.wait = true;
  std::vector<char> src(flags.size, 1);
  std::vector<char> dst(flags.size, 0);
  std::vector<double> memcpy_s, broadcast_s, reduce_s;
  for (int round = 0; round < flags.rounds + 1; ++round) {
    const double m = Seconds([&] { std::memcpy(dst.data(), src.data(), flags.size); });
    absl::Status status;
    const double bc =
        Seconds([&] { status = gpumux::comm::BroadcastOut(client, ta, {tout}, waited).status(); });
    if (!status.ok()) return Fail(status);
    const double ra = Seconds([&] {
      auto sum = gpumux::comm::ReduceAdd(client, {ta, tb}, DeviceIndex(0), waited);
      status = sum.status();
    });
    if (!status.ok()) return Fail(status);
    if (round == 0) continue;  // warm-up: first touches of the memory
    memcpy_s.push_back(m);
    broadcast_s.push_back(bc);
    reduce_s.push_back(ra);
  }
  const double gb = static_cast<double>(flags.size) / 1e9;
  const double m = Median(memcpy_s);
  const double bc = Median(broadcast_s);
  const double ra = Median(reduce_s);
  std::printf("comm_size_bytes=%llu\n", static_cast<unsigned long long>(flags.size));
  std::printf("memcpy_gbps=%.2f\n", gb / m);
  std::printf("comm_broadcast_gbps=%.2f\n", gb / bc);
  std::printf("comm_reduce_add_gbps=%.2f\n", gb / ra);
  std::printf("comm_broadcast_over_memcpy=%.3f\n", m / bc);
  std::printf("comm_reduce_add_over_memcpy=%.3f\n", m / ra);
  return 0;
}
