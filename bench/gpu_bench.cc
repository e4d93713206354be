// The CUDA backend's figures, side by side in one run on a real GPU (the
// issue's goals are ratios against CUDA in this same process):
//   - Allocate+Free through the daemon vs cudaMalloc+cudaFree of the same
//     size vs the no-op RPC;
//   - trace replay through the daemon's CUDA backend vs the host backend in
//     process, and PyTorch's own figures for the same traces;
//   - host to device through the staging buffer vs a pinned cudaMemcpy;
//   - device to device through the daemon vs cudaMemcpy;
//   - what mapping a new segment costs (cudaIpcOpenMemHandle) and how often
//     the client's mapping cache avoids it;
//   - what becomes of an interprocess event whose recorder is SIGKILLed
//     before its work ran (killed_recorder_event);
//   - compact mode (expandable segments of cuMemCreate pages): the traces
//     replayed through a compact daemon beside the default one, and what
//     mapping a fresh page costs;
//   - torch.cuda.comm's all_reduce on the daemon's engine (NCCL where it
//     loaded: `collectives=`) vs cudaMemcpy of the same bytes, and the first
//     all_reduce of a session (the communicator made) vs a later one and
//     vs the first of a second session (made already).
//
// usage: gpumux_gpu_bench [--address A] [--gpumuxd PATH] [--testdata DIR]
// Without --address it starts gpumuxd --backend=cuda (next to this binary,
// or in the build tree) on a temporary socket. Prints name=value lines; exit
// 77 when no CUDA device is visible.

#include <cuda_runtime_api.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

#include "bench/bench_daemon.h"
#include "bench/bench_stats.h"
#include "client/client_testing.h"
#include "gpumux/client.h"
#include "gpumux/comm_types.h"
#include "gpumux/copy.h"
#include "gpumux/copy_options.h"
#include "gpumux/memory.h"
#include "gpumux/nccl.h"
#include "replay/client_target.h"
#include "replay/inprocess_target.h"
#include "replay/trace_replay.h"

namespace {

using gpumux::bench::Percentile;

using Clock = std::chrono::steady_clock;
constexpr uint64_t kMiB = uint64_t{1} << 20;

double TimeUs(const std::function<void()>& body) {
  const auto start = Clock::now();
  body();
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

bool Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return true;
  std::fprintf(stderr, "gpumux_gpu_bench: %s: %s\n", what, cudaGetErrorName(error));
  return false;
}

bool Check(const absl::Status& status, const char* what) {
  if (status.ok()) return true;
  std::fprintf(stderr, "gpumux_gpu_bench: %s: %s\n", what, status.ToString().c_str());
  return false;
}

// PyTorch 2.11's figures on the H200 for the recorded traces (testdata/README).
struct TorchFigures {
  const char* name;
  const char* file;
  int64_t peak_requested;
  int64_t peak_reserved;
};
constexpr TorchFigures kTraces[] = {
    {"resnet50", "trace_resnet50_train_b64.csv.gz", 5518937512, 6803161088},
    {"gpt2", "trace_gpt2s_train_b8_s1024.csv.gz", 12856116936, 13061062656},
};

bool AllocateFree(gpumux::Client& client) {
  const uint64_t size = 2 * kMiB;
  std::vector<double> noop, pair, sync_pair, raw;
  bool ok = true;
  for (int i = 0; i < 200; ++i) {  // warm-up: segment mapping, allocator cache
    ok &= client.Ping().ok();
    ok &= gpumux::memory::Allocate(client, size).ok();
  }
  for (int round = 0; round < 5 && ok; ++round) {
    for (int i = 0; i < 1000; ++i) noop.push_back(TimeUs([&] { ok &= client.Ping().ok(); }));
    for (int i = 0; i < 1000; ++i)
      pair.push_back(TimeUs([&] { ok &= gpumux::memory::Allocate(client, size).ok(); }));
    ok &= gpumux::memory::FlushFrees(client).ok();
    for (int i = 0; i < 1000; ++i) {
      sync_pair.push_back(TimeUs([&] {
        auto b = gpumux::memory::Allocate(client, size);
        ok &= b.ok() && gpumux::memory::Free(client, std::move(*b)).ok();
      }));
    }
    for (int i = 0; i < 1000; ++i) {
      raw.push_back(TimeUs([&] {
        void* p = nullptr;
        ok &= cudaMalloc(&p, size) == cudaSuccess && cudaFree(p) == cudaSuccess;
      }));
    }
  }
  if (!ok) return Check(absl::InternalError("a call failed"), "allocate/free");
  const double noop50 = Percentile(noop, 0.5), pair50 = Percentile(pair, 0.5);
  const double sync50 = Percentile(sync_pair, 0.5), raw50 = Percentile(raw, 0.5);
  std::printf("noop_p50_us=%.2f\n", noop50);
  std::printf("alloc_free_2mib_p50_us=%.2f\n", pair50);
  std::printf("alloc_free_sync_2mib_p50_us=%.2f\n", sync50);
  std::printf("cuda_malloc_free_2mib_p50_us=%.2f\n", raw50);
  std::printf("alloc_free_over_noop_p50=%.3f\n", pair50 / noop50);
  std::printf("alloc_free_sync_over_noop_p50=%.3f\n", sync50 / noop50);
  std::printf("alloc_free_over_cuda_malloc_free_p50=%.3f\n", pair50 / raw50);
  return true;
}

// Each trace through a fresh client of the daemon at `address`, as a new
// PyTorch process would run it: no segment cached or mapped before.
// `ops_per_second` receives each trace's replay speed.
bool Replays(const std::string& address, const std::string& testdata,
             std::vector<double>* ops_per_second) {
  for (const TorchFigures& trace : kTraces) {
    absl::StatusOr<std::vector<gpumux::TraceEvent>> events =
        gpumux::LoadTrace(testdata + "/" + trace.file);
    if (!Check(events.status(), trace.file)) return false;
    absl::StatusOr<std::unique_ptr<gpumux::InProcessTarget>> host =
        gpumux::InProcessTarget::Create(gpumux::AllocatorOptions());
    if (!Check(host.status(), "host target")) return false;
    absl::StatusOr<gpumux::ReplayResult> on_host = gpumux::Replay(*events, **host);
    if (!Check(on_host.status(), "host replay")) return false;
    gpumux::ClientOptions options;
    options.client_name = absl::StrCat("gpumux_gpu_bench replay ", trace.name);
    absl::StatusOr<std::unique_ptr<gpumux::Client>> fresh =
        gpumux::Client::Connect(address, options);
    if (!Check(fresh.status(), "connect for a replay")) return false;
    gpumux::Client& client = **fresh;
    const uint64_t opened_before = gpumux::OpenedMappingCountForTest(client);
    absl::StatusOr<gpumux::ReplayResult> on_cuda;
    {
      gpumux::ClientReplayTarget target(client, gpumux::DeviceIndex(0));
      on_cuda = gpumux::Replay(*events, target);
    }
    if (!Check(on_cuda.status(), "cuda replay")) return false;
    if (!Check(gpumux::memory::EmptyCache(client).status(), "empty_cache")) return false;
    const uint64_t opened = gpumux::OpenedMappingCountForTest(client) - opened_before;
    const double allocations = static_cast<double>(on_cuda->operations) / 2;
    const char* n = trace.name;
    std::printf("replay_%s_peak_requested_cuda=%lld\n", n,
                static_cast<long long>(on_cuda->peak_requested));
    std::printf("replay_%s_peak_reserved_cuda=%lld\n", n,
                static_cast<long long>(on_cuda->peak_reserved));
    std::printf("replay_%s_peak_reserved_host=%lld\n", n,
                static_cast<long long>(on_host->peak_reserved));
    std::printf("replay_%s_device_allocs_cuda=%lld\n", n,
                static_cast<long long>(on_cuda->device_allocs));
    std::printf(
        "replay_%s_peak_requested_cuda_over_torch=%.4f\n", n,
        static_cast<double>(on_cuda->peak_requested) / static_cast<double>(trace.peak_requested));
    std::printf(
        "replay_%s_peak_reserved_cuda_over_torch=%.4f\n", n,
        static_cast<double>(on_cuda->peak_reserved) / static_cast<double>(trace.peak_reserved));
    std::printf(
        "replay_%s_peak_reserved_cuda_over_host=%.4f\n", n,
        static_cast<double>(on_cuda->peak_reserved) / static_cast<double>(on_host->peak_reserved));
    ops_per_second->push_back(static_cast<double>(on_cuda->operations) / on_cuda->seconds);
    std::printf("replay_%s_ops_per_second_cuda=%.0f\n", n, ops_per_second->back());
    std::printf("replay_%s_ipc_opens=%llu\n", n, static_cast<unsigned long long>(opened));
    std::printf("replay_%s_ipc_cache_hit_rate=%.4f\n", n,
                1.0 - static_cast<double>(opened) / allocations);
  }
  return true;
}

// Compact mode on the CUDA backend (a second gpumuxd with
// --allocator-conf=compact_segments:True: expandable segments of cuMemCreate
// pages, mapped by this process from exported descriptors): every trace
// replayed through it, beside the default daemon's replay of the same trace
// in this run (`default_ops_per_second`), and what a fresh page costs: an
// allocation that maps new pages in the daemon and here vs one on pages
// mapped already.
bool CompactMode(const std::string& gpumuxd, const std::string& testdata,
                 const std::vector<double>& default_ops_per_second) {
  gpumux::bench::BenchDaemon daemon(
      gpumuxd,
      std::vector<std::string>{"--backend=cuda", "--allocator-conf=compact_segments:True"});
  gpumux::ClientOptions options;
  options.client_name = "gpumux_gpu_bench compact";
  auto client = gpumux::Client::Connect(daemon.address(), options);
  if (!Check(client.status(), "connect (compact)")) return false;
  gpumux::Client& c = **client;
  // Keeps the range reserved (in the daemon and here): the loop maps pages only.
  auto anchor = gpumux::memory::Allocate(c, 2 * kMiB);
  if (!Check(anchor.status(), "anchor allocation")) return false;
  std::vector<double> fresh, mapped;
  for (int i = 0; i < 100; ++i) {
    std::vector<gpumux::DeviceBuffer> held;
    fresh.push_back(TimeUs([&] {
      auto b = gpumux::memory::Allocate(c, 2 * kMiB);
      if (b.ok()) held.push_back(*std::move(b));
    }));
    held.clear();
    if (!Check(gpumux::memory::FlushFrees(c), "flush")) return false;
    mapped.push_back(TimeUs([&] { (void)gpumux::memory::Allocate(c, 2 * kMiB); }));
    if (!Check(gpumux::memory::FlushFrees(c), "flush") ||
        !Check(gpumux::memory::EmptyCache(c).status(), "empty_cache"))
      return false;
  }
  anchor = gpumux::DeviceBuffer();
  const double fresh50 = Percentile(fresh, 0.5), mapped50 = Percentile(mapped, 0.5);
  std::printf("compact_alloc_new_page_p50_us=%.2f\n", fresh50);
  std::printf("compact_alloc_mapped_page_p50_us=%.2f\n", mapped50);
  std::printf("compact_page_map_cost_estimate_us=%.2f\n", fresh50 - mapped50);
  for (size_t i = 0; i < std::size(kTraces); ++i) {
    const TorchFigures& trace = kTraces[i];
    absl::StatusOr<std::vector<gpumux::TraceEvent>> events =
        gpumux::LoadTrace(testdata + "/" + trace.file);
    if (!Check(events.status(), trace.file)) return false;
    absl::StatusOr<gpumux::ReplayResult> replayed;
    {
      gpumux::ClientReplayTarget target(c, gpumux::DeviceIndex(0));
      replayed = gpumux::Replay(*events, target);
    }
    if (!Check(replayed.status(), "compact replay")) return false;
    if (!Check(gpumux::memory::EmptyCache(c).status(), "empty_cache")) return false;
    const char* n = trace.name;
    const double ops = static_cast<double>(replayed->operations) / replayed->seconds;
    std::printf("replay_%s_peak_reserved_compact_cuda=%lld\n", n,
                static_cast<long long>(replayed->peak_reserved));
    std::printf("replay_%s_reserved_over_requested_compact_cuda=%.4f\n", n,
                static_cast<double>(replayed->peak_reserved) /
                    static_cast<double>(replayed->peak_requested));
    std::printf("replay_%s_device_allocs_compact_cuda=%lld\n", n,
                static_cast<long long>(replayed->device_allocs));
    std::printf("replay_%s_device_frees_compact_cuda=%lld\n", n,
                static_cast<long long>(replayed->device_frees));
    std::printf("replay_%s_ops_per_second_compact_cuda=%.0f\n", n, ops);
    if (i < default_ops_per_second.size() && default_ops_per_second[i] > 0) {
      std::printf("replay_%s_ops_compact_over_default_cuda=%.3f\n", n,
                  ops / default_ops_per_second[i]);
    }
  }
  return true;
}

// GB/s of `bytes` moved by `copy`, best of `reps` after one warm-up.
double Bandwidth(uint64_t bytes, int reps, const std::function<bool()>& copy) {
  if (!copy()) return 0;
  double best = 0;
  for (int i = 0; i < reps; ++i) {
    bool ok = true;
    const double us = TimeUs([&] { ok = copy(); });
    if (!ok) return 0;
    best = std::max(best, static_cast<double>(bytes) / (us * 1e3));
  }
  return best;
}

bool Copies(gpumux::Client& client) {
  // Host copies of 256 MiB; device copies of 2 GiB (HBM moves 256 MiB in
  // ~0.1 ms, shorter than a round trip plus a wait: that would measure RPCs).
  const uint64_t bytes = 256 * kMiB;
  const uint64_t d2d_bytes = 2048 * kMiB;
  void* pinned = nullptr;
  void* device_a = nullptr;
  void* device_b = nullptr;
  if (!Check(cudaMallocHost(&pinned, bytes), "cudaMallocHost") ||
      !Check(cudaMalloc(&device_a, d2d_bytes), "cudaMalloc") ||
      !Check(cudaMalloc(&device_b, d2d_bytes), "cudaMalloc")) {
    return false;
  }
  std::vector<char> pageable(bytes, 1);
  std::memset(pinned, 1, bytes);
  const double pinned_h2d = Bandwidth(bytes, 5, [&] {
    return cudaMemcpy(device_a, pinned, bytes, cudaMemcpyHostToDevice) == cudaSuccess;
  });
  const double pageable_h2d = Bandwidth(bytes, 5, [&] {
    return cudaMemcpy(device_a, pageable.data(), bytes, cudaMemcpyHostToDevice) == cudaSuccess;
  });
  const double local_d2d = Bandwidth(d2d_bytes, 10, [&] {
    return cudaMemcpy(device_b, device_a, d2d_bytes, cudaMemcpyDeviceToDevice) == cudaSuccess &&
           cudaDeviceSynchronize() == cudaSuccess;
  });
  cudaFree(device_a);
  cudaFree(device_b);
  absl::StatusOr<gpumux::DeviceBuffer> staged_target = gpumux::memory::Allocate(client, bytes);
  absl::StatusOr<gpumux::DeviceBuffer> a = gpumux::memory::Allocate(client, d2d_bytes);
  absl::StatusOr<gpumux::DeviceBuffer> b = gpumux::memory::Allocate(client, d2d_bytes);
  if (!Check(staged_target.status(), "allocate") || !Check(a.status(), "allocate") ||
      !Check(b.status(), "allocate")) {
    return false;
  }
  gpumux::CopyOptions staged;
  staged.path = gpumux::TransferPath::kStaging;
  staged.wait = true;
  const double staging_h2d = Bandwidth(bytes, 5, [&] {
    return gpumux::copy::HostToDevice(client, *staged_target, 0, pageable.data(), bytes, staged)
        .ok();
  });
  const double staging_h2d_pinned_source = Bandwidth(bytes, 5, [&] {
    return gpumux::copy::HostToDevice(client, *staged_target, 0, pinned, bytes, staged).ok();
  });
  gpumux::CopyOptions waited;
  waited.wait = true;
  const double daemon_d2d = Bandwidth(d2d_bytes, 10, [&] {
    return gpumux::copy::DeviceToDevice(client, *b, 0, *a, 0, d2d_bytes, waited).ok();
  });
  std::printf("h2d_copy_bytes=%llu\n", static_cast<unsigned long long>(bytes));
  std::printf("d2d_copy_bytes=%llu\n", static_cast<unsigned long long>(d2d_bytes));
  std::printf("pinned_cuda_memcpy_h2d_gbps=%.2f\n", pinned_h2d);
  std::printf("pageable_cuda_memcpy_h2d_gbps=%.2f\n", pageable_h2d);
  std::printf("staging_h2d_gbps=%.2f\n", staging_h2d);
  std::printf("staging_h2d_from_pinned_gbps=%.2f\n", staging_h2d_pinned_source);
  std::printf("staging_h2d_over_pinned_memcpy=%.3f\n", staging_h2d / pinned_h2d);
  std::printf("cuda_memcpy_d2d_gbps=%.2f\n", local_d2d);
  std::printf("daemon_d2d_gbps=%.2f\n", daemon_d2d);
  std::printf("daemon_d2d_over_cuda_memcpy=%.3f\n", daemon_d2d / local_d2d);
  cudaFreeHost(pinned);
  return staging_h2d > 0 && daemon_d2d > 0;
}

// all_reduce of one 1 GiB f32 tensor (out of place: with one device NCCL
// copies it) vs cudaMemcpy of the same bytes; then what the first call of a
// session costs against a later one, on a fresh daemon so that the first
// call makes the communicator, and a second session's first call.
bool Collectives(gpumux::Client& client, const std::string& address) {
  absl::StatusOr<gpumux::DeviceProperties> properties =
      client.GetDeviceProperties(gpumux::DeviceIndex(0));
  if (!Check(properties.status(), "properties")) return false;
  std::printf("collectives=%s\n", properties->collectives.c_str());
  const auto small_all_reduce = [](gpumux::Client& c, gpumux::DeviceBuffer& buffer) {
    const gpumux::TensorRef tensor{&buffer, 0, gpumux::Dtype::kFloat32, {1024}};
    gpumux::CollectiveOptions options;
    options.wait = true;
    return TimeUs(
        [&] { (void)gpumux::nccl::AllReduce(c, {tensor}, gpumux::ReduceOp::kSum, options); });
  };
  absl::StatusOr<gpumux::DeviceBuffer> small = gpumux::memory::Allocate(client, 4096);
  if (!Check(small.status(), "allocate")) return false;
  const double first = small_all_reduce(client, *small);
  std::vector<double> later;
  for (int i = 0; i < 50; ++i) later.push_back(small_all_reduce(client, *small));
  gpumux::ClientOptions options;
  options.client_name = "gpumux_gpu_bench second session";
  auto second = gpumux::Client::Connect(address, options);
  if (!Check(second.status(), "connect")) return false;
  absl::StatusOr<gpumux::DeviceBuffer> second_small = gpumux::memory::Allocate(*(*second), 4096);
  if (!Check(second_small.status(), "allocate")) return false;
  const double second_first = small_all_reduce(**second, *second_small);
  const double later50 = Percentile(later, 0.5);
  std::printf("all_reduce_first_call_us=%.1f\n", first);
  std::printf("all_reduce_later_p50_us=%.1f\n", later50);
  std::printf("all_reduce_second_session_first_call_us=%.1f\n", second_first);
  std::printf("all_reduce_first_over_later=%.1f\n", first / later50);

  const uint64_t bytes = 1024 * kMiB;
  absl::StatusOr<gpumux::DeviceBuffer> in = gpumux::memory::Allocate(client, bytes);
  absl::StatusOr<gpumux::DeviceBuffer> out = gpumux::memory::Allocate(client, bytes);
  if (!Check(in.status(), "allocate") || !Check(out.status(), "allocate")) return false;
  const int64_t n = static_cast<int64_t>(bytes / 4);
  const gpumux::TensorRef input{&*in, 0, gpumux::Dtype::kFloat32, {n}};
  const gpumux::TensorRef output{&*out, 0, gpumux::Dtype::kFloat32, {n}};
  gpumux::CollectiveOptions waited;
  waited.wait = true;
  const double all_reduce = Bandwidth(bytes, 10, [&] {
    return gpumux::nccl::AllReduceOut(client, {input}, {output}, gpumux::ReduceOp::kSum, waited)
        .ok();
  });
  void* a = nullptr;
  void* b = nullptr;
  if (!Check(cudaMalloc(&a, bytes), "cudaMalloc") || !Check(cudaMalloc(&b, bytes), "cudaMalloc"))
    return false;
  const double memcpy = Bandwidth(bytes, 10, [&] {
    return cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice) == cudaSuccess &&
           cudaDeviceSynchronize() == cudaSuccess;
  });
  cudaFree(a);
  cudaFree(b);
  std::printf("all_reduce_1gib_one_gpu_gbps=%.2f\n", all_reduce);
  std::printf("all_reduce_1gib_over_cuda_memcpy=%.3f\n", memcpy > 0 ? all_reduce / memcpy : 0);
  return all_reduce > 0;
}

// Allocations that each need a new segment (shareable: a segment of their
// own) map it on arrival; cached ones do not.
bool MappingCost(gpumux::Client& client) {
  gpumux::AllocateOptions shareable;
  shareable.shareable = true;
  std::vector<double> fresh;
  for (int i = 0; i < 200; ++i) {
    fresh.push_back(TimeUs([&] {
      (void)gpumux::memory::Allocate(client, 2 * kMiB, gpumux::DeviceIndex(0), shareable);
    }));
  }
  std::vector<double> cached;
  for (int i = 0; i < 200; ++i)
    cached.push_back(TimeUs([&] { (void)gpumux::memory::Allocate(client, 2 * kMiB); }));
  const double fresh50 = Percentile(fresh, 0.5), cached50 = Percentile(cached, 0.5);
  std::printf("alloc_new_segment_p50_us=%.2f\n", fresh50);
  std::printf("alloc_cached_segment_p50_us=%.2f\n", cached50);
  std::printf("ipc_open_cost_estimate_us=%.2f\n", fresh50 - cached50);
  return true;
}

// --probe-recorder: the child half of KilledRecorderProbe. Records an
// interprocess event behind a 30 s host callback, prints its handle, waits.
int ProbeRecorder() {
  cudaStream_t stream = nullptr;
  cudaEvent_t event = nullptr;
  cudaIpcEventHandle_t handle;
  if (!Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate") ||
      !Check(cudaLaunchHostFunc(
                 stream, [](void*) { sleep(30); }, nullptr),
             "cudaLaunchHostFunc") ||
      !Check(cudaEventCreateWithFlags(&event, cudaEventInterprocess | cudaEventDisableTiming),
             "cudaEventCreate") ||
      !Check(cudaEventRecord(event, stream), "cudaEventRecord") ||
      !Check(cudaIpcGetEventHandle(&handle, event), "cudaIpcGetEventHandle")) {
    return 1;
  }
  std::printf("%s\n", absl::BytesToHexString(
                          absl::string_view(reinterpret_cast<const char*>(&handle), sizeof(handle)))
                          .c_str());
  std::fflush(stdout);
  pause();
  return 0;
}

// What CUDA does with an interprocess event whose recorder is SIGKILLed
// before the recorded work ran: does it complete, stay pending (a stream
// waiting on it would never drain: the daemon cannot cancel such a wait),
// or fail? A fact for the daemon's design, printed as figures.
void KilledRecorderProbe() {
  int out[2];
  if (pipe(out) != 0) return;
  const pid_t child = fork();
  if (child == 0) {
    dup2(out[1], 1);
    close(out[0]);
    execl("/proc/self/exe", "gpumux_gpu_bench", "--probe-recorder", nullptr);
    _exit(127);
  }
  close(out[1]);
  FILE* from_child = fdopen(out[0], "r");
  char line[256] = {};
  const bool got = std::fgets(line, sizeof(line), from_child) != nullptr;
  std::string hex(line);
  while (!hex.empty() && (hex.back() == '\n' || hex.back() == '\r')) hex.pop_back();
  const std::string bytes = absl::HexStringToBytes(hex);
  cudaEvent_t event = nullptr;
  cudaIpcEventHandle_t handle;
  bool opened = false;
  if (got && bytes.size() == sizeof(handle)) {
    std::memcpy(&handle, bytes.data(), sizeof(handle));
    opened = cudaIpcOpenEventHandle(&event, handle) == cudaSuccess;
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  fclose(from_child);
  if (!opened) {
    cudaGetLastError();
    std::printf("killed_recorder_event=unopenable\n");
    return;
  }
  const auto deadline = Clock::now() + std::chrono::seconds(3);
  cudaError_t state = cudaEventQuery(event);
  while (state == cudaErrorNotReady && Clock::now() < deadline) {
    cudaGetLastError();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    state = cudaEventQuery(event);
  }
  cudaGetLastError();
  std::printf("killed_recorder_event=%s\n", state == cudaSuccess         ? "completed"
                                            : state == cudaErrorNotReady ? "pending_after_3s"
                                                                         : cudaGetErrorName(state));
  cudaEventDestroy(event);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--probe-recorder") == 0) return ProbeRecorder();
  std::string address, gpumuxd = gpumux::bench::DefaultDaemonPath(), testdata;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--address") == 0)
      address = argv[i + 1];
    else if (std::strcmp(argv[i], "--gpumuxd") == 0)
      gpumuxd = argv[i + 1];
    else if (std::strcmp(argv[i], "--testdata") == 0)
      testdata = argv[i + 1];
  }
  if (testdata.empty()) {
    const char* env = std::getenv("GPUMUX_TESTDATA");
    testdata = env != nullptr ? env : GPUMUX_SOURCE_DIR "/testdata";
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "gpumux_gpu_bench: no CUDA device is visible\n");
    return 77;
  }
  std::unique_ptr<gpumux::bench::BenchDaemon> daemon;
  std::string daemon_address;  // compact mode needs a daemon of its own: not with --address
  if (address.empty()) {
    daemon = std::make_unique<gpumux::bench::BenchDaemon>(
        gpumuxd, std::vector<std::string>{"--backend=cuda"});
    address = daemon_address = daemon->address();
  }
  int rc = 0;
  {
    gpumux::ClientOptions options;
    options.client_name = "gpumux_gpu_bench";
    options.staging_buffer_size = 64 * kMiB;
    auto client = gpumux::Client::Connect(address, options);
    if (!Check(client.status(), "connect")) {
      rc = 1;
    } else if (cudaSetDevice(0) != cudaSuccess || cudaFree(nullptr) != cudaSuccess) {
      rc = 1;
    } else {
      gpumux::Client& c = **client;
      KilledRecorderProbe();
      if (!AllocateFree(c)) rc = 1;
      if (!Copies(c)) rc = 1;
      if (!MappingCost(c)) rc = 1;
      if (!Collectives(c, address)) rc = 1;
      std::vector<double> ops_per_second;
      if (!Replays(address, testdata, &ops_per_second)) rc = 1;
      if (address == daemon_address && !CompactMode(gpumuxd, testdata, ops_per_second)) rc = 1;
    }
  }
  return rc;
}
