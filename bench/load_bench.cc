// Load and memory per session, through a real gpumuxd child process.
//
// Load: N client processes (default 64) each run, for S seconds (default 60),
// a random mix of gpumux operations (allocate with the previous free riding
// on it, memset and 4 KiB host-to-device copies waited for, event record and
// query, stream synchronize, stats, Session.Ping), alternating with pings to
// a trivial gRPC C++ server in this process that only answers them. Both see
// the same clients under the same load, so the ratios show what gpumux adds.
// Memory: 256 idle sessions, then the same sessions each having used its
// default stream on both devices: daemon RSS and threads per session.
//
//   gpumux_load_bench [--clients N] [--seconds S] [--sessions K]
//
// Prints name=value lines.

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_daemon.h"
#include "gpumux/client.h"
#include "gpumux/copy.h"
#include "gpumux/device_buffer.h"
#include "gpumux/event.h"
#include "gpumux/memory.h"
#include "gpumux/stream.h"
#include "gpumux/v1/session.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/support/process_figures.h"

namespace {

using Clock = std::chrono::steady_clock;
using gpumux::testing::Percentile;
using gpumux::testing::ProcessFigures;
using gpumux::testing::ReadProcessFigures;

// Answers Session.Ping and nothing else: the floor of a gRPC round trip.
class TrivialPingService final : public gpumux::v1::Session::CallbackService {
  grpc::ServerUnaryReactor* Ping(grpc::CallbackServerContext* context,
                                 const gpumux::v1::PingRequest*,
                                 gpumux::v1::PingResponse*) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

double Micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

// One client process: prints "<kind> <microseconds>" per operation and
// "error <kind>" per failure.
int RunClient(const std::string& address, const std::string& ping_address, double seconds,
              uint64_t seed) {
  auto connected = gpumux::Client::Connect(address);
  if (!connected.ok()) {
    std::fprintf(stderr, "load client: %s\n", connected.status().ToString().c_str());
    return 1;
  }
  gpumux::Client& client = **connected;
  auto trivial = gpumux::v1::Session::NewStub(
      grpc::CreateChannel(ping_address, grpc::InsecureChannelCredentials()));
  absl::StatusOr<gpumux::DeviceBuffer> buffer = gpumux::memory::Allocate(client, 1 << 20);
  absl::StatusOr<gpumux::Stream> stream = client.CreateStream(gpumux::DeviceIndex(0));
  if (!buffer.ok() || !stream.ok()) return 1;
  gpumux::Event event(client);
  std::vector<char> host(4096, 'x');
  std::mt19937_64 rng(seed);
  std::string out;
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(seconds));
  static const char* const kKinds[] = {"allocate", "memset", "h2d_4k", "event",
                                       "sync",     "stats",  "ping"};
  while (Clock::now() < end) {
    const int kind = static_cast<int>(rng() % 7);
    const auto start = Clock::now();
    absl::Status status;
    switch (kind) {
      case 0: {
        absl::StatusOr<gpumux::DeviceBuffer> b =
            gpumux::memory::Allocate(client, 4096 << (rng() % 8));
        status = b.status();
        break;  // freed here: the free rides on the next Allocate
      }
      case 1:
        status =
            gpumux::copy::Memset(client, *buffer, 0, 1, buffer->size(), {.wait = true}).status();
        break;
      case 2:
        status =
            gpumux::copy::HostToDevice(client, *buffer, 0, host.data(), host.size(), {.wait = true})
                .status();
        break;
      case 3:
        status = event.Record(*stream);
        if (status.ok()) status = event.Query().status();
        break;
      case 4:
        status = stream->Synchronize();
        break;
      case 5:
        status = gpumux::memory::MemoryAllocated(client).status();
        break;
      case 6:
        status = client.Ping();
        break;
    }
    const double us = Micros(Clock::now() - start);
    out += status.ok() ? std::string(kKinds[kind]) + " " + std::to_string(us) + "\n"
                       : std::string("error ") + kKinds[kind] + "\n";
    grpc::ClientContext context;
    gpumux::v1::PingResponse response;
    const auto ping_start = Clock::now();
    const grpc::Status pinged = trivial->Ping(&context, gpumux::v1::PingRequest(), &response);
    out += pinged.ok() ? "trivial_ping " + std::to_string(Micros(Clock::now() - ping_start)) + "\n"
                       : std::string("error trivial_ping\n");
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

int RunLoad(const gpumux::bench::BenchDaemon& daemon, int clients, double seconds) {
  TrivialPingService service;
  const std::string ping_socket = "/tmp/gpumux-load-ping-" + std::to_string(getpid()) + ".sock";
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + ping_socket, grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) return 1;

  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<std::pair<pid_t, FILE*>> children;
  for (int i = 0; i < clients; ++i) {
    int out[2];
    if (pipe(out) != 0) return 1;
    const pid_t pid = fork();
    if (pid == 0) {
      dup2(out[1], 1);
      close(out[0]);
      const std::string seconds_arg = std::to_string(seconds), seed = std::to_string(i + 1);
      std::string a = daemon.address(), p = "unix://" + ping_socket;
      execl(self.c_str(), self.c_str(), "--client", a.c_str(), p.c_str(), seconds_arg.c_str(),
            seed.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(out[1]);
    children.emplace_back(pid, fdopen(out[0], "r"));
  }
  std::map<std::string, std::vector<double>> samples;
  std::map<std::string, long> errors;
  char line[256];
  for (auto& [pid, from] : children) {
    while (std::fgets(line, sizeof(line), from) != nullptr) {
      char kind[64];
      double us = 0;
      if (std::sscanf(line, "error %63s", kind) == 1) {
        ++errors[kind];
      } else if (std::sscanf(line, "%63s %lf", kind, &us) == 2) {
        samples[kind].push_back(us);
      }
    }
    fclose(from);
    waitpid(pid, nullptr, 0);
  }
  server->Shutdown();
  unlink(ping_socket.c_str());

  long gpumux_ops = 0, total_errors = 0;
  for (auto& [kind, values] : samples) {
    if (kind != "trivial_ping") gpumux_ops += static_cast<long>(values.size());
    std::printf("%s_p50_us=%.1f\n%s_p99_us=%.1f\n", kind.c_str(), Percentile(values, 0.5),
                kind.c_str(), Percentile(values, 0.99));
  }
  for (auto& [kind, count] : errors) {
    std::printf("%s_errors=%ld\n", kind.c_str(), count);
    total_errors += count;
  }
  const double trivial_per_s = static_cast<double>(samples["trivial_ping"].size()) / seconds;
  std::printf(
      "load_clients=%d\nload_seconds=%.0f\ngpumux_ops_per_s=%.0f\ntrivial_pings_per_s=%.0f\nerrors="
      "%ld\n",
      clients, seconds, static_cast<double>(gpumux_ops) / seconds, trivial_per_s, total_errors);
  std::printf(
      "ping_over_trivial_ping_p50=%.2f\n",
      Percentile(samples["ping"], 0.5) / std::max(1e-9, Percentile(samples["trivial_ping"], 0.5)));
  return total_errors == 0 ? 0 : 1;
}

int RunMemory(const gpumux::bench::BenchDaemon& daemon, int sessions) {
  const ProcessFigures base = ReadProcessFigures(daemon.pid());
  std::vector<std::unique_ptr<gpumux::Client>> clients;
  for (int i = 0; i < sessions; ++i) {
    auto client = gpumux::Client::Connect(daemon.address());
    if (!client.ok()) return 1;
    clients.push_back(std::move(*client));
  }
  usleep(200000);
  const ProcessFigures idle = ReadProcessFigures(daemon.pid());
  for (auto& client : clients) {
    for (int d = 0; d < 2; ++d) {
      if (!client->DefaultStream(gpumux::DeviceIndex(d)).Synchronize().ok()) return 1;
    }
  }
  usleep(200000);
  const ProcessFigures used = ReadProcessFigures(daemon.pid());
  std::printf(
      "memory_sessions=%d\nrss_kib_per_idle_session=%.1f\nrss_kib_per_session_with_streams=%.1f\n"
      "threads_base=%lld\nthreads_idle_sessions=%lld\nthreads_sessions_with_streams=%lld\n",
      sessions, static_cast<double>(idle.rss_kb - base.rss_kb) / sessions,
      static_cast<double>(used.rss_kb - base.rss_kb) / sessions,
      static_cast<long long>(base.threads), static_cast<long long>(idle.threads),
      static_cast<long long>(used.threads));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 6 && std::strcmp(argv[1], "--client") == 0) {
    return RunClient(argv[2], argv[3], std::atof(argv[4]), std::strtoull(argv[5], nullptr, 10));
  }
  int clients = 64, sessions = 256;
  double seconds = 60;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--clients") == 0) clients = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--seconds") == 0) seconds = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--sessions") == 0) sessions = std::atoi(argv[i + 1]);
  }
  int rc = 0;
  {
    gpumux::bench::BenchDaemon daemon(gpumux::bench::DefaultDaemonPath(),
                                      {"--backend=host", "--host-devices=2"});
    rc |= RunLoad(daemon, clients, seconds);
  }
  {
    gpumux::bench::BenchDaemon daemon(gpumux::bench::DefaultDaemonPath(),
                                      {"--backend=host", "--host-devices=2"});
    rc |= RunMemory(daemon, sessions);
  }
  return rc;
}
