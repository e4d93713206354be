// /metrics through a real gpumuxd (host backend, one 4 GiB device): the time
// and size of a scrape with 1, 64 and 256 sessions, each holding an
// allocation, a stream and an event; and a daemon-mode client's
// Allocate+Free (the free riding on the next Allocate, as the library does
// it) while a scraper polls every 100 ms, next to the same without it, in
// alternating rounds so machine noise hits both alike.
//
// usage: gpumux_metrics_bench [--gpumuxd PATH] [--rounds R] [--round-ms MS]
// (R rounds of MS milliseconds each, with and without the scraper)
// Prints name=value lines: scrape_p50_ms_<N>, scrape_p99_ms_<N> and
// scrape_bytes_<N> for N sessions; alloc_free_p50_us, alloc_free_scraped_p50_us
// and alloc_free_scraped_over_quiet_p50 (the figure the issue caps at 1.05).

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_daemon.h"
#include "bench/bench_flags.h"
#include "bench/bench_stats.h"
#include "gpumux/client.h"
#include "gpumux/device_buffer.h"
#include "gpumux/memory.h"
#include "httplib.h"
#include "tests/support/free_port.h"

namespace {

using gpumux::bench::Percentile;
using Clock = std::chrono::steady_clock;
constexpr uint64_t kMiB = uint64_t{1} << 20;

// A session holding what the bench's sessions hold.
struct Holder {
  std::unique_ptr<gpumux::Client> client;
  gpumux::DeviceBuffer buffer;
  std::optional<gpumux::Stream> stream;
  std::optional<gpumux::Event> event;
};

}  // namespace

int main(int argc, char** argv) {
  std::string gpumuxd;
  int rounds = 10;
  int round_ms = 500;
  absl::Status parsed = gpumux::bench::ParseBenchFlags(
      argc, argv, {{"gpumuxd", &gpumuxd}, {"rounds", &rounds}, {"round-ms", &round_ms}});
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s\nusage: %s [--gpumuxd PATH] [--rounds R] [--round-ms MS]\n",
                 std::string(parsed.message()).c_str(), argv[0]);
    return 2;
  }
  const int port = gpumux::testing::FreePort();
  gpumux::bench::BenchDaemon daemon(
      gpumuxd.empty() ? gpumux::bench::DefaultDaemonPath() : gpumuxd,
      {"--backend=host", "--host-devices=1", "--host-device-memory=4GiB",
       "--metrics-listen=127.0.0.1:" + std::to_string(port)});
  httplib::Client http("127.0.0.1", port);
  http.set_read_timeout(10, 0);
  auto scrape = [&http](std::string* body) {
    httplib::Result result = http.Get("/metrics");
    if (!result || result->status != 200) return false;
    if (body != nullptr) *body = std::move(result->body);
    return true;
  };

  std::vector<Holder> holders;
  for (int sessions : {1, 64, 256}) {
    while (static_cast<int>(holders.size()) < sessions) {
      Holder h;
      auto client = gpumux::Client::Connect(
          daemon.address(),
          {.client_name = "holder-" + std::to_string(holders.size()),
           .tenant = "tenant-" + std::to_string(holders.size() % 16),
           .labels = {{"pod", "pod-" + std::to_string(holders.size())}, {"namespace", "bench"}},
           .allocation = gpumux::AllocationMode::kDaemon});
      if (!client.ok()) {
        std::fprintf(stderr, "gpumux_metrics_bench: %s\n", client.status().ToString().c_str());
        return 1;
      }
      h.client = *std::move(client);
      auto buffer = gpumux::memory::Allocate(*h.client, kMiB);
      auto stream = h.client->CreateStream(gpumux::DeviceIndex(0));
      auto event = h.client->CreateEvent(gpumux::DeviceIndex(0));
      if (!buffer.ok() || !stream.ok() || !event.ok()) {
        std::fprintf(stderr, "gpumux_metrics_bench: a session's resources failed\n");
        return 1;
      }
      h.buffer = *std::move(buffer);
      h.stream = *std::move(stream);
      h.event = *std::move(event);
      holders.push_back(std::move(h));
    }
    std::vector<double> ms;
    std::string body;
    for (int i = 0; i < 40; ++i) {
      const Clock::time_point start = Clock::now();
      if (!scrape(&body)) {
        std::fprintf(stderr, "gpumux_metrics_bench: GET /metrics failed\n");
        return 1;
      }
      if (i >= 5)
        ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    }
    std::printf("scrape_p50_ms_%d=%.3f\n", sessions, Percentile(ms, 0.5));
    std::printf("scrape_p99_ms_%d=%.3f\n", sessions, Percentile(ms, 0.99));
    std::printf("scrape_bytes_%d=%zu\n", sessions, body.size());
    std::fflush(stdout);
  }

  // Allocate+Free of one more daemon-mode session, with and without a
  // scraper polling every 100 ms (with 256 sessions open).
  auto client = gpumux::Client::Connect(
      daemon.address(), {.client_name = "timed", .allocation = gpumux::AllocationMode::kDaemon});
  if (!client.ok()) return 1;
  std::atomic<bool> scraping{false};
  std::atomic<bool> stop{false};
  std::atomic<int> scrapes{0};
  std::thread scraper([&] {
    httplib::Client poller("127.0.0.1", port);
    while (!stop.load()) {
      if (scraping.load() && poller.Get("/metrics")) scrapes.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  std::vector<double> quiet, scraped;
  bool failed = false;
  for (int round = 0; round < 2 * rounds + 2 && !failed; ++round) {
    const bool with_scraper = round % 2 == 1;
    scraping.store(with_scraper);
    std::vector<double>& samples = with_scraper ? scraped : quiet;
    const Clock::time_point end = Clock::now() + std::chrono::milliseconds(round_ms);
    while (Clock::now() < end && !failed) {
      const Clock::time_point start = Clock::now();
      auto b = gpumux::memory::Allocate(*(*client), kMiB);  // carries the previous iteration's free
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
      if (!b.ok()) failed = true;
      if (round >= 2) samples.push_back(us);
    }
  }
  stop.store(true);
  scraper.join();
  if (failed) {
    std::fprintf(stderr, "gpumux_metrics_bench: an allocation failed\n");
    return 1;
  }
  const double quiet50 = Percentile(quiet, 0.5), scraped50 = Percentile(scraped, 0.5);
  std::printf("alloc_free_p50_us=%.2f\n", quiet50);
  std::printf("alloc_free_scraped_p50_us=%.2f\n", scraped50);
  std::printf("alloc_free_scraped_over_quiet_p50=%.3f\n", scraped50 / quiet50);
  std::printf("scrapes_during_scraped_rounds=%d\n", scrapes.load());
  return 0;
}
