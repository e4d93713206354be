// Streams, events and host-to-device copies through a real gpumuxd, over the
// raw wire API (what any client of the protos pays), side by side in one run:
//   - host->device throughput of S bytes as inline bytes (Copy.HostToDevice
//     with data) and through the staging buffer (the client's memcpy into the
//     mapped buffer + Copy.HostToDevice from staging), both waiting for the
//     copy, each as a ratio to a plain memcpy of S bytes;
//   - the same copy through libgpumux (copy::HostToDevice, staging path,
//     waited), whose double-buffered chunks overlap the client's memcpy with
//     the daemon's;
//   - Event.Record + Event.Query and Stream.Synchronize round trips as ratios
//     to the no-op RPC (Session.Ping).
// Rounds interleave the kinds so machine noise hits them alike.
//
// usage: gpumux_stream_bench [--gpumuxd PATH] [--size BYTES] [--rounds R]
//                            [--iterations N]
// Starts gpumuxd (host backend) on a temporary socket and stops it after.

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_daemon.h"
#include "bench/bench_flags.h"
#include "common/ipc/memory_socket.h"
#include "gpumux/client.h"
#include "gpumux/common/sealed_memory.h"
#include "gpumux/copy.h"
#include "gpumux/copy_options.h"
#include "gpumux/memory.h"
#include "grpcpp/grpcpp.h"
#include "tests/support/wire_session.h"

namespace {

namespace v1 = gpumux::v1;
using Clock = std::chrono::steady_clock;

struct Flags {
  std::string gpumuxd;
  uint64_t size = uint64_t{16} << 20;
  int rounds = 5;
  int iterations = 1000;  // per round, for the latency kinds
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename Body>
double TimeUs(Body body) {
  auto start = Clock::now();
  body();
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

pid_t daemon_pid = -1;  // the gpumuxd this run started

[[noreturn]] void Die(const char* what, const grpc::Status& status) {
  std::fprintf(stderr, "gpumux_stream_bench: %s: %s\n", what, status.error_message().c_str());
  if (daemon_pid > 0) kill(daemon_pid, SIGTERM);
  std::exit(1);
}

void Check(const char* what, const grpc::Status& status) {
  if (!status.ok()) Die(what, status);
}

void Run(const Flags& flags, const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(128 << 20);
  args.SetMaxSendMessageSize(128 << 20);
  auto channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  gpumux::testing::WireSession s(channel, "gpumux_stream_bench");
  if (!s.open_status().ok()) Die("open session", s.open_status());
  const uint64_t size = flags.size;

  v1::AllocateRequest alloc;
  alloc.set_size(size);
  v1::AllocateResponse allocated;
  Check("allocate", s.memory().Allocate(s.Context().get(), alloc, &allocated));
  const uint64_t allocation = allocated.allocation().allocation_id();

  v1::GetStagingBufferRequest staging_request;
  staging_request.set_min_size(size);
  v1::StagingBuffer staging;
  Check("staging buffer", s.copy().GetStagingBuffer(s.Context().get(), staging_request, &staging));
  absl::StatusOr<std::string> socket_path = gpumux::UnixSocketPathOf(address);
  if (!socket_path.ok())
    Die("staging buffer",
        grpc::Status(grpc::StatusCode::INTERNAL, std::string(socket_path.status().message())));
  gpumux::MemoryFileFetcher fetcher(gpumux::MemorySocketPath(*socket_path), s.credentials());
  absl::StatusOr<gpumux::SealedMemory> file =
      fetcher.Fetch(staging.handle().data(), staging.size());
  if (!file.ok()) {
    Die("fetch staging buffer",
        grpc::Status(grpc::StatusCode::INTERNAL, std::string(file.status().message())));
  }
  void* mapped = mmap(nullptr, staging.size(), PROT_READ | PROT_WRITE, MAP_SHARED, file->fd(), 0);
  if (mapped == MAP_FAILED) {
    Die("mmap staging buffer", grpc::Status(grpc::StatusCode::INTERNAL, std::strerror(errno)));
  }
  auto* staging_bytes = static_cast<char*>(mapped);

  // Source bytes: random, never zeros; memcpy's destination pre-faulted.
  std::string source(size, '\0');
  std::mt19937_64 rng(42);
  for (char& c : source) c = static_cast<char>(rng() | 1);
  std::vector<char> memcpy_target(size, 1);

  v1::HostToDeviceRequest inline_copy;
  inline_copy.mutable_dst()->set_allocation_id(allocation);
  inline_copy.set_data(source);
  inline_copy.mutable_options()->set_wait(true);
  v1::HostToDeviceRequest staged_copy;
  staged_copy.mutable_dst()->set_allocation_id(allocation);
  staged_copy.mutable_staging()->set_size(size);
  staged_copy.mutable_options()->set_wait(true);

  v1::CreateEventRequest create_event;
  v1::CreateEventResponse event;
  Check("create event", s.event().Create(s.Context().get(), create_event, &event));
  v1::RecordEventRequest record;
  record.set_event(event.event());
  v1::EventRequest query;
  query.set_event(event.event());
  v1::StreamRequest sync;  // default stream of device 0

  auto client = gpumux::Client::Connect(address, {.client_name = "gpumux_stream_bench_client"});
  if (!client.ok())
    Die("connect libgpumux",
        grpc::Status(grpc::StatusCode::UNAVAILABLE, std::string(client.status().message())));
  auto buffer = gpumux::memory::Allocate(*(*client), size, gpumux::DeviceIndex(0));
  if (!buffer.ok())
    Die("libgpumux allocate",
        grpc::Status(grpc::StatusCode::INTERNAL, std::string(buffer.status().message())));
  const gpumux::CopyOptions library_copy{.wait = true, .path = gpumux::TransferPath::kStaging};
  auto library_h2d = [&] {
    auto copied_by_library =
        gpumux::copy::HostToDevice(*(*client), *buffer, 0, source.data(), size, library_copy);
    if (!copied_by_library.ok()) {
      Die("libgpumux copy", grpc::Status(grpc::StatusCode::INTERNAL,
                                         std::string(copied_by_library.status().message())));
    }
  };

  std::vector<double> memcpy_us, inline_us, staged_us, library_us, noop_us, record_query_us,
      sync_us;
  v1::CopyResponse copied;
  // Warm-up: page faults in the daemon's mappings, connection, streams.
  for (int i = 0; i < 3; ++i) {
    Check("inline copy", s.copy().HostToDevice(s.Context().get(), inline_copy, &copied));
    std::memcpy(staging_bytes, source.data(), size);
    Check("staged copy", s.copy().HostToDevice(s.Context().get(), staged_copy, &copied));
    library_h2d();
  }
  for (int round = 0; round < flags.rounds; ++round) {
    for (int i = 0; i < 5; ++i) {
      memcpy_us.push_back(TimeUs([&] { std::memcpy(memcpy_target.data(), source.data(), size); }));
      inline_us.push_back(TimeUs([&] {
        Check("inline copy", s.copy().HostToDevice(s.Context().get(), inline_copy, &copied));
      }));
      staged_us.push_back(TimeUs([&] {
        std::memcpy(staging_bytes, source.data(), size);
        Check("staged copy", s.copy().HostToDevice(s.Context().get(), staged_copy, &copied));
      }));
      library_us.push_back(TimeUs(library_h2d));
    }
    for (int i = 0; i < flags.iterations; ++i) {
      v1::PingRequest ping;
      v1::PingResponse pong;
      noop_us.push_back(
          TimeUs([&] { Check("ping", s.session().Ping(s.Context().get(), ping, &pong)); }));
    }
    for (int i = 0; i < flags.iterations; ++i) {
      v1::RecordEventResponse recorded;
      v1::QueryEventResponse done;
      record_query_us.push_back(TimeUs([&] {
        Check("record event", s.event().Record(s.Context().get(), record, &recorded));
        Check("query event", s.event().Query(s.Context().get(), query, &done));
      }));
    }
    for (int i = 0; i < flags.iterations; ++i) {
      v1::SynchronizeStreamResponse synced;
      sync_us.push_back(TimeUs(
          [&] { Check("synchronize", s.stream().Synchronize(s.Context().get(), sync, &synced)); }));
    }
  }
  munmap(mapped, staging.size());

  // Throughput in GB/s (1e9 bytes per second) from each kind's median time.
  auto gbps = [&](const std::vector<double>& us) {
    return static_cast<double>(size) / (Median(us) * 1e3);
  };
  const double memcpy_gbps = gbps(memcpy_us), inline_gbps = gbps(inline_us),
               staged_gbps = gbps(staged_us);
  const double library_gbps = gbps(library_us);
  const double noop = Median(noop_us), record_query = Median(record_query_us),
               synced = Median(sync_us);
  std::printf("copy_size=%llu\n", static_cast<unsigned long long>(size));
  std::printf("memcpy_gbps=%.2f\n", memcpy_gbps);
  std::printf("h2d_inline_gbps=%.2f\n", inline_gbps);
  std::printf("h2d_staging_gbps=%.2f\n", staged_gbps);
  std::printf("h2d_inline_over_memcpy=%.3f\n", inline_gbps / memcpy_gbps);
  std::printf("h2d_staging_over_memcpy=%.3f\n", staged_gbps / memcpy_gbps);
  std::printf("h2d_libgpumux_staging_gbps=%.2f\n", library_gbps);
  std::printf("h2d_libgpumux_staging_over_memcpy=%.3f\n", library_gbps / memcpy_gbps);
  std::printf("noop_p50_us=%.2f\n", noop);
  std::printf("event_record_query_p50_us=%.2f\n", record_query);
  std::printf("stream_sync_p50_us=%.2f\n", synced);
  std::printf("event_record_query_over_noop_p50=%.3f\n", record_query / noop);
  std::printf("stream_sync_over_noop_p50=%.3f\n", synced / noop);
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  absl::Status parsed = gpumux::bench::ParseBenchFlags(argc, argv,
                                                       {{"gpumuxd", &flags.gpumuxd},
                                                        {"size", &flags.size, 1, int64_t{64} << 20},
                                                        {"rounds", &flags.rounds},
                                                        {"iterations", &flags.iterations}});
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s\n", std::string(parsed.message()).c_str());
    std::fprintf(stderr,
                 "usage: %s [--gpumuxd PATH] [--size BYTES<=64MiB] [--rounds R] [--iterations N]\n",
                 argv[0]);
    return 2;
  }
  gpumux::bench::BenchDaemon daemon(
      flags.gpumuxd.empty() ? gpumux::bench::DefaultDaemonPath() : flags.gpumuxd,
      {"--backend=host"});
  daemon_pid = daemon.pid();
  Run(flags, daemon.address());
  return 0;
}
