// RPC latency through a real gpumuxd over its Unix socket, side by side in one
// run: a no-op round trip (Session.Ping, which authenticates like every
// session call), Allocate+Free as the client library does it (the free rides
// on the next Allocate), Allocate+Free as two synchronous RPCs, and
// Allocate+Free of a second client in local allocation mode (the fast path:
// a cache hit makes no call).
// Rounds interleave the three so machine noise hits them alike.
//
// usage: gpumux_rpc_bench [--address A] [--gpumuxd PATH] [--iterations N]
//                         [--rounds R] [--size BYTES]
// Without --address it starts gpumuxd (next to this binary's build tree, or
// PATH) on a temporary socket and stops it afterwards.
// Prints name=value lines: noop_p50_us, alloc_free_p50_us,
// alloc_free_over_noop_p50 (and p99s, and the synchronous pair's figures),
// local_alloc_free_p50_us and local_alloc_free_over_noop_p50 (and p99s).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_daemon.h"
#include "bench/bench_flags.h"
#include "bench/bench_stats.h"
#include "gpumux/client.h"
#include "gpumux/memory.h"

namespace {

using gpumux::bench::Percentile;

using Clock = std::chrono::steady_clock;

struct Flags {
  std::string address;
  std::string gpumuxd;
  int iterations = 2000;
  int rounds = 10;
  uint64_t size = 4096;
};

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  absl::Status parsed = gpumux::bench::ParseBenchFlags(
      argc, argv,
      {{"address", &flags.address},
       {"gpumuxd", &flags.gpumuxd},
       {"iterations", &flags.iterations},
       {"rounds", &flags.rounds},
       {"size", &flags.size, 1, std::numeric_limits<int64_t>::max()}});
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s\n", std::string(parsed.message()).c_str());
    std::fprintf(
        stderr,
        "usage: %s [--address A] [--gpumuxd PATH] [--iterations N] [--rounds R] [--size BYTES]\n",
        argv[0]);
    return 2;
  }
  std::unique_ptr<gpumux::bench::BenchDaemon> daemon;
  if (flags.address.empty()) {
    daemon = std::make_unique<gpumux::bench::BenchDaemon>(
        flags.gpumuxd.empty() ? gpumux::bench::DefaultDaemonPath() : flags.gpumuxd,
        std::vector<std::string>{});
    flags.address = daemon->address();
  }

  int rc = 0;
  {
    auto client = gpumux::Client::Connect(flags.address, {.client_name = "gpumux_rpc_bench"});
    if (!client.ok()) {
      std::fprintf(stderr, "gpumux_rpc_bench: %s\n", client.status().ToString().c_str());
      rc = 1;
    } else {
      gpumux::Client& c = **client;
      auto local_client = gpumux::Client::Connect(
          flags.address,
          {.client_name = "gpumux_rpc_bench_local", .allocation = gpumux::AllocationMode::kLocal});
      if (!local_client.ok()) {
        std::fprintf(stderr, "gpumux_rpc_bench: %s\n", local_client.status().ToString().c_str());
        return 1;
      }
      gpumux::Client& local = **local_client;
      std::vector<double> noop, pair, sync_pair, local_pair;
      auto time_us = [](auto&& body) {
        auto start = Clock::now();
        body();
        return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
      };
      // Warm up: connection, segment mapping, allocator cache.
      for (int i = 0; i < 200; ++i) {
        (void)c.Ping();
        auto b = gpumux::memory::Allocate(c, flags.size);
        auto l = gpumux::memory::Allocate(local, flags.size);
        if (!b.ok() || !l.ok()) {
          std::fprintf(stderr, "allocate: %s\n",
                       (b.ok() ? l.status() : b.status()).ToString().c_str());
          return 1;
        }
      }
      for (int round = 0; round < flags.rounds && rc == 0; ++round) {
        for (int i = 0; i < flags.iterations; ++i) {
          noop.push_back(time_us([&] {
            if (!c.Ping().ok()) rc = 1;
          }));
        }
        for (int i = 0; i < flags.iterations; ++i) {
          pair.push_back(time_us([&] {
            auto b =
                gpumux::memory::Allocate(c, flags.size);  // carries the previous iteration's free
            if (!b.ok()) rc = 1;
          }));  // the buffer's destructor queued its free inside the timed body
        }
        (void)gpumux::memory::FlushFrees(c);
        for (int i = 0; i < flags.iterations; ++i) {
          sync_pair.push_back(time_us([&] {
            auto b = gpumux::memory::Allocate(c, flags.size);
            if (!b.ok() || !gpumux::memory::Free(c, std::move(*b)).ok()) rc = 1;
          }));
        }
        for (int i = 0; i < flags.iterations; ++i) {
          local_pair.push_back(time_us([&] {
            auto b = gpumux::memory::Allocate(local, flags.size);
            if (!b.ok()) rc = 1;
          }));  // freed, locally, inside the timed body
        }
      }
      if (rc != 0) {
        std::fprintf(stderr, "gpumux_rpc_bench: a call failed\n");
      } else {
        double noop50 = Percentile(noop, 0.5), noop99 = Percentile(noop, 0.99);
        double pair50 = Percentile(pair, 0.5), pair99 = Percentile(pair, 0.99);
        double sync50 = Percentile(sync_pair, 0.5), sync99 = Percentile(sync_pair, 0.99);
        std::printf("samples_per_kind=%zu\n", noop.size());
        std::printf("allocation_size=%llu\n", static_cast<unsigned long long>(flags.size));
        std::printf("alloc_free_sync_p50_us=%.2f\n", sync50);
        std::printf("alloc_free_sync_p99_us=%.2f\n", sync99);
        std::printf("alloc_free_sync_over_noop_p50=%.3f\n", sync50 / noop50);
        std::printf("noop_p99_us=%.2f\n", noop99);
        std::printf("alloc_free_p99_us=%.2f\n", pair99);
        std::printf("alloc_free_over_noop_p99=%.3f\n", pair99 / noop99);
        std::printf("noop_p50_us=%.2f\n", noop50);
        std::printf("alloc_free_p50_us=%.2f\n", pair50);
        std::printf("alloc_free_over_noop_p50=%.3f\n", pair50 / noop50);
        const double local50 = Percentile(local_pair, 0.5), local99 = Percentile(local_pair, 0.99);
        std::printf("local_alloc_free_p50_us=%.3f\n", local50);
        std::printf("local_alloc_free_p99_us=%.3f\n", local99);
        std::printf("local_alloc_free_over_noop_p50=%.4f\n", local50 / noop50);
        std::printf("local_alloc_free_over_noop_p99=%.4f\n", local99 / noop99);
      }
    }
  }
  return rc;
}
