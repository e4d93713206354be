// The fast path's round trips to the daemon, side by side in one run through
// a real gpumuxd (host backend, one 256 MiB device): a no-op RPC
// (Session.Ping); a lease (a local-mode allocation that the client's cache
// cannot serve: Memory.Lease and mapping the segment); a return
// (empty_cache of that one free lease: Memory.Free and unmapping); and a
// pressure release, two sessions of which one holds the free cache the
// other needs: from the allocation's request until its grant, which takes
// the daemon's refusal, its question on the first session's stream, that
// client returning its leases, its answer, and the granted lease.
// Rounds interleave the kinds so machine noise hits them alike.
//
// usage: gpumux_lease_bench [--gpumuxd PATH] [--rounds R]
// Prints name=value lines: noop_p50_us, lease_p50_us, return_p50_us,
// pressure_release_p50_us (and p99s), and lease_over_noop_p50,
// pressure_release_over_lease_p50.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_daemon.h"
#include "bench/bench_flags.h"
#include "bench/bench_stats.h"
#include "gpumux/client.h"
#include "gpumux/device_buffer.h"
#include "gpumux/memory.h"

namespace {

using gpumux::bench::Percentile;

using Clock = std::chrono::steady_clock;
constexpr uint64_t kMiB = uint64_t{1} << 20;

template <typename Body>
double TimeUs(Body&& body) {
  const Clock::time_point start = Clock::now();
  body();
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

std::unique_ptr<gpumux::Client> Connect(const std::string& address, const char* name) {
  auto client = gpumux::Client::Connect(
      address, {.client_name = name, .allocation = gpumux::AllocationMode::kLocal});
  if (!client.ok()) {
    std::fprintf(stderr, "gpumux_lease_bench: %s\n", client.status().ToString().c_str());
    return nullptr;
  }
  return *std::move(client);
}

}  // namespace

int main(int argc, char** argv) {
  std::string gpumuxd;
  int rounds = 200;
  absl::Status parsed =
      gpumux::bench::ParseBenchFlags(argc, argv, {{"gpumuxd", &gpumuxd}, {"rounds", &rounds}});
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s\nusage: %s [--gpumuxd PATH] [--rounds R]\n",
                 std::string(parsed.message()).c_str(), argv[0]);
    return 2;
  }
  gpumux::bench::BenchDaemon daemon(
      gpumuxd.empty() ? gpumux::bench::DefaultDaemonPath() : gpumuxd,
      {"--backend=host", "--host-devices=1", "--host-device-memory=256MiB"});
  std::unique_ptr<gpumux::Client> holder = Connect(daemon.address(), "holder");
  std::unique_ptr<gpumux::Client> requester = Connect(daemon.address(), "requester");
  if (holder == nullptr || requester == nullptr) return 1;
  const gpumux::DeviceIndex device(0);
  std::vector<double> noop, lease, give_back, pressure;
  bool failed = false;
  auto check = [&](const absl::Status& status, const char* what) {
    if (status.ok()) return;
    std::fprintf(stderr, "gpumux_lease_bench: %s: %s\n", what, status.ToString().c_str());
    failed = true;
  };
  for (int round = 0; round < rounds + 10 && !failed; ++round) {
    const bool warm_up = round < 10;
    const double ping = TimeUs([&] { check(requester->Ping(), "ping"); });
    // A lease of 24 MiB (large blocks over 10 MiB get a segment of their own
    // size), and its return.
    absl::StatusOr<gpumux::DeviceBuffer> block;
    const double leased =
        TimeUs([&] { block = gpumux::memory::Allocate(*requester, 24 * kMiB, device); });
    check(block.status(), "lease");
    block = absl::UnknownError("freed");  // back into the requester's cache
    const double returned =
        TimeUs([&] { check(gpumux::memory::EmptyCache(*requester).status(), "return"); });
    // The holder caches 192 MiB of free leases; the requester's 160 MiB then
    // need 96 MiB of them.
    {
      std::vector<gpumux::DeviceBuffer> cached;
      for (int i = 0; i < 8 && !failed; ++i) {
        absl::StatusOr<gpumux::DeviceBuffer> b =
            gpumux::memory::Allocate(*holder, 24 * kMiB, device);
        check(b.status(), "fill the holder's cache");
        if (b.ok()) cached.push_back(*std::move(b));
      }
    }
    const double relieved =
        TimeUs([&] { block = gpumux::memory::Allocate(*requester, 160 * kMiB, device); });
    check(block.status(), "allocation under pressure");
    block = absl::UnknownError("freed");
    check(gpumux::memory::EmptyCache(*requester).status(), "empty the requester's cache");
    check(gpumux::memory::EmptyCache(*holder).status(), "empty the holder's cache");
    if (warm_up) continue;
    noop.push_back(ping);
    lease.push_back(leased);
    give_back.push_back(returned);
    pressure.push_back(relieved);
  }
  if (failed) return 1;
  const double noop50 = Percentile(noop, 0.5), lease50 = Percentile(lease, 0.5);
  const double pressure50 = Percentile(pressure, 0.5);
  std::printf("samples_per_kind=%zu\n", noop.size());
  std::printf("noop_p50_us=%.1f\n", noop50);
  std::printf("noop_p99_us=%.1f\n", Percentile(noop, 0.99));
  std::printf("lease_p50_us=%.1f\n", lease50);
  std::printf("lease_p99_us=%.1f\n", Percentile(lease, 0.99));
  std::printf("return_p50_us=%.1f\n", Percentile(give_back, 0.5));
  std::printf("return_p99_us=%.1f\n", Percentile(give_back, 0.99));
  std::printf("pressure_release_p50_us=%.1f\n", pressure50);
  std::printf("pressure_release_p99_us=%.1f\n", Percentile(pressure, 0.99));
  std::printf("lease_over_noop_p50=%.2f\n", lease50 / noop50);
  std::printf("pressure_release_over_lease_p50=%.2f\n", pressure50 / lease50);
  return 0;
}
