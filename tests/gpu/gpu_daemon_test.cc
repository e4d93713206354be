// gpumuxd with the CUDA backend, driven by real client processes that run
// their own kernels on its memory: sharing between processes, interprocess
// events, free fences, every copy path, random fills, and reclaiming a
// SIGKILLed client's memory. Each test runs against a daemon with PyTorch's
// default allocator (segments by cudaMalloc, legacy CUDA IPC) and one in
// compact mode (expandable segments of cuMemCreate pages, mapped by the
// clients from exported descriptors). Skips where no CUDA device is visible.

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/cuda_ipc_mapping.h"
#include "common/tensor/reduce.h"
#include "common/tensor/rng_fill.h"
#include "gmock/gmock.h"
#include "gpumux/client.h"
#include "gpumux/comm.h"
#include "gpumux/comm_types.h"
#include "gpumux/copy.h"
#include "gpumux/copy_options.h"
#include "gpumux/cuda_interop.h"
#include "gpumux/device_buffer.h"
#include "gpumux/memory.h"
#include "gpumux/nccl.h"
#include "gpumux/random.h"
#include "gpumux/random_options.h"
#include "gpumux/v1/observe.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/cross_process/child_process.h"
#include "tests/gpu/test_kernels.h"
#include "tests/status_matchers.h"
#include "tests/support/raw_session.h"
#include "tests/support/test_binary.h"

namespace gpumux {
namespace {

using ::gpumux::testing::Child;
using ::gpumux::testing::DaemonProcess;
using ::gpumux::testing::IsOkAndHolds;
using ::gpumux::testing::TestBinary;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr DeviceIndex kDevice(0);

std::string ChildProgram() {
  return TestBinary(std::string(GPUMUX_BINARY_DIR) + "/tests/gpu/gpu_client_child");
}

// A device counter the test kernels add mismatches to.
class Counter {
 public:
  Counter() {
    cudaMalloc(reinterpret_cast<void**>(&count_), sizeof(*count_));
    cudaMemset(count_, 0, sizeof(*count_));
  }
  ~Counter() { cudaFree(count_); }
  unsigned long long* get() { return count_; }
  unsigned long long Read() {
    unsigned long long value = ~0ull;
    cudaMemcpy(&value, count_, sizeof(value), cudaMemcpyDeviceToHost);
    return value;
  }

 private:
  unsigned long long* count_ = nullptr;
};

// The daemon's allocator: "default" or "compact" (compact_segments:True).
class GpuDaemonTest : public ::testing::TestWithParam<std::string> {
 protected:
  bool compact() const { return GetParam() == "compact"; }
  // gpumuxd's flags for the CUDA backend in this test's allocator mode.
  std::vector<std::string> DaemonFlags(std::vector<std::string> more = {}) const {
    std::vector<std::string> flags = {"--backend=cuda"};
    if (compact()) flags.push_back("--allocator-conf=compact_segments:True");
    flags.insert(flags.end(), more.begin(), more.end());
    return flags;
  }

  void SetUp() override {
    if (!CudaDeviceVisible()) GTEST_SKIP() << "no CUDA device is visible";
    ASSERT_EQ(testing::LoadTestKernels(), cudaSuccess);
    daemon_ = std::make_unique<DaemonProcess>(DaemonFlags());
    ClientOptions options;
    options.client_name = "gpu test";
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(daemon_->address(), options);
    ASSERT_OK(client);
    client_ = *std::move(client);
    ASSERT_EQ(client_->backend(), "cuda");
  }

  // Open sessions, through the Observe service.
  int SessionCount() {
    auto observe = v1::Observe::NewStub(daemon_->channel());
    grpc::ClientContext context;
    v1::ListSessionsRequest request;
    v1::ListSessionsResponse response;
    if (!observe->ListSessions(&context, request, &response).ok()) return -1;
    return response.sessions_size();
  }

  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<Client> client_;
};

TEST_P(GpuDaemonTest, ReportsTheRealDevice) {
  absl::StatusOr<DeviceProperties> properties = client_->GetDeviceProperties(kDevice);
  ASSERT_OK(properties);
  cudaDeviceProp prop;
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  char bus_id[32] = {};
  ASSERT_EQ(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), 0), cudaSuccess);
  EXPECT_EQ(properties->backend, "cuda");
  EXPECT_EQ(properties->name, prop.name);
  EXPECT_EQ(properties->total_memory, prop.totalGlobalMem);
  EXPECT_EQ(properties->pci_bus_id, bus_id);
  EXPECT_TRUE(properties->healthy);
  EXPECT_EQ(properties->health, "ok");
  EXPECT_THAT(properties->arch_list, ::testing::Contains("sm_90"));
}

// A writes a pattern with its kernel and shares the memory; B imports it,
// checks and complements it with its kernel; A checks B's result.
TEST_P(GpuDaemonTest, TwoProcessesShareMemoryAndRunTheirOwnKernels) {
  const uint64_t words = 16 * kMiB;  // 64 MiB
  const uint32_t seed = 0x5eed;
  AllocateOptions shareable;
  shareable.shareable = true;
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(*client_, words * 4, kDevice, shareable);
  ASSERT_OK(buffer);
  ASSERT_NE(buffer->data(), nullptr);
  auto* data = static_cast<uint32_t*>(buffer->data());
  ASSERT_EQ(testing::LaunchWritePattern(data, words, seed, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  absl::StatusOr<std::string> token = memory::Share(*client_, *buffer);
  ASSERT_OK(token);

  Child reader(ChildProgram(), {"share-reader", daemon_->address(), absl::BytesToHexString(*token),
                                absl::StrCat(words), absl::StrCat(seed)});
  EXPECT_EQ(reader.ReadLine(), "mismatches 0");
  EXPECT_EQ(reader.Wait(), 0);

  Counter mismatches;
  ASSERT_EQ(testing::LaunchCountMismatches(data, words, seed, /*complemented=*/true,
                                           mismatches.get(), nullptr),
            cudaSuccess);
  EXPECT_EQ(mismatches.Read(), 0u);
}

// The daemon's copy finishes before this process's kernel reads the data,
// because the kernel's stream waits on the copy's interprocess event.
TEST_P(GpuDaemonTest, InterprocessEventOrdersAKernelAfterADaemonCopy) {
  const uint64_t words = 32 * kMiB;  // 128 MiB
  const uint32_t seed = 77;
  absl::StatusOr<DeviceBuffer> busy = memory::Allocate(*client_, 4096 * kMiB, kDevice);
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(*client_, words * 4, kDevice);
  ASSERT_OK(busy);
  ASSERT_OK(buffer);
  std::vector<uint32_t> pattern(words);
  for (uint64_t i = 0; i < words; ++i) pattern[i] = testing::PatternWord(i, seed);
  // Keep the daemon's stream busy first, so an unordered kernel would run early.
  for (int i = 0; i < 4; ++i)
    ASSERT_OK(copy::Memset(*client_, *busy, 0, static_cast<uint8_t>(i), busy->size()).status());
  CopyOptions options;
  options.completion_event = true;
  options.path = TransferPath::kInline;
  absl::StatusOr<Event> copied =
      copy::HostToDevice(*client_, *buffer, 0, pattern.data(), words * 4, options);
  ASSERT_OK(copied);
  absl::StatusOr<std::string> handle = copied->IpcHandle();
  ASSERT_OK(handle);
  absl::StatusOr<CudaIpcEvent> event = CudaIpcEvent::Open(*handle);
  ASSERT_OK(event);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  Counter mismatches;
  ASSERT_OK(event->Wait(stream));
  ASSERT_EQ(testing::LaunchCountMismatches(static_cast<uint32_t*>(buffer->data()), words, seed,
                                           false, mismatches.get(), stream),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(mismatches.Read(), 0u);
  cudaStreamDestroy(stream);
}

// A buffer freed while this process's kernel may still use it is not handed
// out again until that kernel finished (the free fence).
TEST_P(GpuDaemonTest, FreedMemoryWaitsForTheClientsKernels) {
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  {
    CudaStreamGuard guard(stream);
    absl::StatusOr<DeviceBuffer> first = memory::Allocate(*client_, 8 * kMiB, kDevice);
    ASSERT_OK(first);
    const uint64_t first_address = first->address();
    ASSERT_EQ(testing::LaunchSpin(500'000'000, stream), cudaSuccess);  // 0.5 s
    ASSERT_EQ(
        testing::LaunchWritePattern(static_cast<uint32_t*>(first->data()), 2 * kMiB, 1, stream),
        cudaSuccess);
    *first = DeviceBuffer();  // queued free, fenced on `stream`
    ASSERT_EQ(cudaStreamQuery(stream), cudaErrorNotReady);
    cudaGetLastError();
    absl::StatusOr<DeviceBuffer> second = memory::Allocate(*client_, 8 * kMiB, kDevice);
    ASSERT_OK(second);
    EXPECT_NE(second->address(), first_address) << "reused while the kernel could still write it";
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    absl::StatusOr<DeviceBuffer> third = memory::Allocate(*client_, 8 * kMiB, kDevice);
    ASSERT_OK(third);
    // The fence completed: the best-fitting block is the first one again.
    EXPECT_EQ(third->address(), first_address);
    // The buffers' fences are recorded on `stream`: freed before it goes.
    ASSERT_OK(memory::FlushFrees(*client_));
  }
  ASSERT_OK(memory::FlushFrees(*client_));
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
}

// torch.cuda.current_blas_handle(): a handle of this thread bound to its
// current CUDA stream; cuBLAS runs on the daemon's memory (y = 3x + y).
TEST_P(GpuDaemonTest, CurrentBlasHandleRunsCublasOnDaemonMemory) {
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  constexpr int kCount = 1 << 16;
  std::vector<float> x(kCount), y(kCount, 2.0f);
  for (int i = 0; i < kCount; ++i) x[i] = static_cast<float>(i);
  absl::StatusOr<DeviceBuffer> dx = memory::Allocate(*client_, kCount * sizeof(float), kDevice);
  absl::StatusOr<DeviceBuffer> dy = memory::Allocate(*client_, kCount * sizeof(float), kDevice);
  ASSERT_OK(dx);
  ASSERT_OK(dy);
  ASSERT_OK(copy::HostToDevice(*client_, *dx, 0, x.data(), kCount * sizeof(float), {.wait = true}));
  ASSERT_OK(copy::HostToDevice(*client_, *dy, 0, y.data(), kCount * sizeof(float), {.wait = true}));
  void* handle = nullptr;
  {
    CudaStreamGuard guard(stream);
    absl::StatusOr<void*> current = client_->CurrentBlasHandle();
    if (absl::IsFailedPrecondition(current.status())) GTEST_SKIP() << current.status();
    ASSERT_OK(current);
    handle = *current;
    // The library libgpumux loaded, for this test's own cuBLAS calls.
    void* cublas = nullptr;
    for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"}) {
      if ((cublas = dlopen(name, RTLD_NOW | RTLD_NOLOAD)) != nullptr) break;
    }
    ASSERT_NE(cublas, nullptr);
    auto get_stream =
        reinterpret_cast<int (*)(void*, cudaStream_t*)>(dlsym(cublas, "cublasGetStream_v2"));
    auto saxpy =
        reinterpret_cast<int (*)(void*, int, const float*, const float*, int, float*, int)>(
            dlsym(cublas, "cublasSaxpy_v2"));
    ASSERT_NE(get_stream, nullptr);
    ASSERT_NE(saxpy, nullptr);
    cudaStream_t bound = nullptr;
    ASSERT_EQ(get_stream(handle, &bound), 0);
    EXPECT_EQ(bound, stream);
    const float alpha = 3.0f;
    ASSERT_EQ(saxpy(handle, kCount, &alpha, static_cast<const float*>(dx->data()), 1,
                    static_cast<float*>(dy->data()), 1),
              0);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  }
  ASSERT_OK(copy::DeviceToHost(*client_, y.data(), *dy, 0, kCount * sizeof(float)));
  for (int i = 0; i < kCount; i += 997) ASSERT_EQ(y[i], 3.0f * i + 2.0f) << "at " << i;
  // The same handle for this thread and device, now bound to the default.
  EXPECT_THAT(client_->CurrentBlasHandle(), IsOkAndHolds(handle));
  cudaStreamDestroy(stream);
}

TEST_P(GpuDaemonTest, EveryCopyPathMovesRandomBytes) {
  const uint64_t size = 24 * kMiB + 4093;
  absl::StatusOr<DeviceBuffer> a = memory::Allocate(*client_, size, kDevice);
  absl::StatusOr<DeviceBuffer> b = memory::Allocate(*client_, size, kDevice);
  ASSERT_OK(a);
  ASSERT_OK(b);
  std::mt19937_64 rng(99);
  std::vector<uint8_t> sent(size);
  for (uint8_t& byte : sent) byte = static_cast<uint8_t>(rng());
  for (TransferPath up : {TransferPath::kInline, TransferPath::kStaging}) {
    for (TransferPath down : {TransferPath::kInline, TransferPath::kStaging}) {
      SCOPED_TRACE(::testing::Message()
                   << "up " << static_cast<int>(up) << " down " << static_cast<int>(down));
      CopyOptions to_device;
      to_device.path = up;
      ASSERT_OK(copy::Memset(*client_, *a, 0, 0, size).status());
      ASSERT_OK(copy::HostToDevice(*client_, *a, 0, sent.data(), size, to_device).status());
      // Device to device through the daemon, then back to the host.
      ASSERT_OK(copy::DeviceToDevice(*client_, *b, 0, *a, 0, size).status());
      CopyOptions to_host;
      to_host.path = down;
      std::vector<uint8_t> received(size);
      ASSERT_OK(copy::DeviceToHost(*client_, received.data(), *b, 0, size, to_host).status());
      EXPECT_TRUE(received == sent);
      // The mapping is the same memory: read it with this process's cudaMemcpy.
      std::vector<uint8_t> direct(size);
      ASSERT_EQ(cudaMemcpy(direct.data(), b->data(), size, cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_TRUE(direct == sent);
    }
  }
  // Memset of an odd range.
  ASSERT_OK(copy::Memset(*client_, *b, 1001, 0xab, 77777).status());
  std::vector<uint8_t> back(size);
  ASSERT_OK(copy::DeviceToHost(*client_, back.data(), *b, 0, size).status());
  for (uint64_t i = 0; i < size; ++i) {
    const uint8_t expected = i >= 1001 && i < 1001 + 77777 ? 0xab : sent[i];
    if (back[i] != expected) {
      ADD_FAILURE() << "byte " << i;
      break;
    }
  }
}

// torch.cuda.manual_seed then a fill: the same bits the host generator writes.
TEST_P(GpuDaemonTest, RandomFillsEqualTheHostGenerator) {
  const uint64_t n = 3 * kMiB + 5;
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(*client_, n * 4, kDevice);
  ASSERT_OK(buffer);
  ASSERT_OK(random::ManualSeed(*client_, 2024, kDevice));
  for (bool bits : {false, true}) {
    absl::StatusOr<GenerateResult> generated =
        bits ? random::Generate(*client_, *buffer, 0, Dtype::kInt32, n, Bits{})
             : random::Generate(*client_, *buffer, 0, Dtype::kFloat32, n, Uniform{-3.0, 5.0});
    ASSERT_OK(generated);
    RngRequest request{bits ? RngDtype::kI32 : RngDtype::kF32,
                       bits ? RngKind::kBits : RngKind::kUniform, n, -3.0, 5.0};
    std::vector<uint8_t> expected(n * 4);
    FillRandom(expected.data(), request, generated->seed, generated->offset);
    std::vector<uint8_t> back(n * 4);
    ASSERT_OK(copy::DeviceToHost(*client_, back.data(), *buffer, 0, n * 4).status());
    EXPECT_TRUE(back == expected) << (bits ? "bits" : "uniform");
  }
}

// torch.cuda.comm on one GPU: reduce_add of three inputs on the device runs
// the reduction kernel (the fallback without NCCL), scatter and gather copy
// 2D slabs, gather reaches the host, and all_reduce of one tensor is itself.
TEST_P(GpuDaemonTest, CollectivesOnOneGpuMatchTheHost) {
  const int64_t rows = 512;
  const int64_t cols = 1031;
  const uint64_t n = static_cast<uint64_t>(rows * cols);
  std::vector<DeviceBuffer> inputs;
  std::vector<std::vector<uint8_t>> host;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(*client_, n * 2, kDevice);
    ASSERT_OK(buffer);
    ASSERT_OK(random::ManualSeed(*client_, 100 + i, kDevice));
    absl::StatusOr<GenerateResult> generated =
        random::Generate(*client_, *buffer, 0, Dtype::kFloat16, n, Uniform{-2.0, 2.0});
    ASSERT_OK(generated);
    std::vector<uint8_t> bytes(n * 2);
    FillRandom(bytes.data(), RngRequest{RngDtype::kF16, RngKind::kUniform, n, -2.0, 2.0},
               generated->seed, generated->offset);
    host.push_back(std::move(bytes));
    inputs.push_back(*std::move(buffer));
  }
  std::vector<TensorRef> refs;
  for (const DeviceBuffer& buffer : inputs)
    refs.push_back(TensorRef{&buffer, 0, Dtype::kFloat16, {rows, cols}, kDevice});
  // reduce_add: the last input on the destination first, then the others.
  absl::StatusOr<CollectiveResult> sum = comm::ReduceAdd(*client_, refs, kDevice);
  ASSERT_OK(sum);
  std::vector<uint8_t> expected = host[2];
  Accumulate(ReduceOp::kSum, RngDtype::kF16, expected.data(), host[0].data(), n);
  Accumulate(ReduceOp::kSum, RngDtype::kF16, expected.data(), host[1].data(), n);
  std::vector<uint8_t> back(n * 2);
  ASSERT_OK(
      copy::DeviceToHost(*client_, back.data(), *sum->tensors[0].buffer(), 0, n * 2).status());
  EXPECT_TRUE(back == expected);
  // scatter along the last dim on device 0 twice, then gather it back.
  absl::StatusOr<CollectiveResult> chunks =
      comm::Scatter(*client_, refs[0], {0, 0}, std::nullopt, -1);
  ASSERT_OK(chunks);
  ASSERT_EQ(chunks->tensors.size(), 2u);
  absl::StatusOr<CollectiveResult> gathered =
      comm::Gather(*client_, {chunks->tensors[0].ref(), chunks->tensors[1].ref()}, 1, kDevice);
  ASSERT_OK(gathered);
  ASSERT_OK(
      copy::DeviceToHost(*client_, back.data(), *gathered->tensors[0].buffer(), 0, n * 2).status());
  EXPECT_TRUE(back == host[0]);
  std::vector<uint8_t> on_host(n * 2);
  ASSERT_OK(comm::GatherToHost(*client_, {chunks->tensors[0].ref(), chunks->tensors[1].ref()},
                               on_host.data(), on_host.size(), -1));
  EXPECT_TRUE(on_host == host[0]);
  // broadcast to its own device is the input; all_reduce of one tensor too.
  absl::StatusOr<CollectiveResult> broadcast = comm::Broadcast(*client_, refs[1], {0});
  ASSERT_OK(broadcast);
  EXPECT_EQ(broadcast->tensors[0].buffer(), &inputs[1]);
  ASSERT_OK(nccl::AllReduce(*client_, {refs[1]}, ReduceOp::kAvg));
  ASSERT_OK(copy::DeviceToHost(*client_, back.data(), inputs[1], 0, n * 2).status());
  EXPECT_TRUE(back == host[1]);
}

// The collectives' engine: NCCL where the machine has it (run-gpu-check puts
// PyTorch's libnccl on the loader's path), copies and the reduction kernel
// with --nccl=off; all_reduce gives the same bytes either way, and the
// single-rank communicator is made once and shared by every session.
TEST_P(GpuDaemonTest, AllReduceMatchesOnNcclAndOnCopies) {
  absl::StatusOr<DeviceProperties> properties = client_->GetDeviceProperties(kDevice);
  ASSERT_OK(properties);
  std::printf("collectives=%s\n", properties->collectives.c_str());
  DaemonProcess copies_daemon(DaemonFlags({"--nccl=off"}));
  ClientOptions options;
  options.client_name = "gpu test, copies";
  absl::StatusOr<std::unique_ptr<Client>> copies =
      Client::Connect(copies_daemon.address(), options);
  ASSERT_OK(copies);
  absl::StatusOr<DeviceProperties> copies_properties = (*copies)->GetDeviceProperties(kDevice);
  ASSERT_OK(copies_properties);
  EXPECT_EQ(copies_properties->collectives, "copies");

  const uint64_t n = 4 * kMiB + 3;
  for (Client* client : {client_.get(), copies->get()}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      absl::StatusOr<DeviceBuffer> in = memory::Allocate(*client, n * 4, kDevice);
      absl::StatusOr<DeviceBuffer> out = memory::Allocate(*client, n * 4, kDevice);
      ASSERT_OK(in);
      ASSERT_OK(out);
      ASSERT_OK(random::ManualSeed(*client, 7, kDevice));
      absl::StatusOr<GenerateResult> generated =
          random::Generate(*client, *in, 0, Dtype::kFloat32, n, Uniform{-1.0, 1.0});
      ASSERT_OK(generated);
      std::vector<uint8_t> expected(n * 4);
      FillRandom(expected.data(), RngRequest{RngDtype::kF32, RngKind::kUniform, n, -1.0, 1.0},
                 generated->seed, generated->offset);
      const TensorRef input{&*in, 0, Dtype::kFloat32, {static_cast<int64_t>(n)}, kDevice};
      const TensorRef output{&*out, 0, Dtype::kFloat32, {static_cast<int64_t>(n)}, kDevice};
      ASSERT_OK(nccl::AllReduceOut(*client, {input}, {output}, op).status());
      std::vector<uint8_t> back(n * 4);
      ASSERT_OK(copy::DeviceToHost(*client, back.data(), *out, 0, n * 4).status());
      EXPECT_TRUE(back == expected) << "one rank: the output is the input";
      ASSERT_OK(nccl::AllReduce(*client, {input}, op).status());
      ASSERT_OK(copy::DeviceToHost(*client, back.data(), *in, 0, n * 4).status());
      EXPECT_TRUE(back == expected) << "in place";
    }
  }
  // A second session on the NCCL daemon reuses the communicator: its first
  // all_reduce pays no set-up (the figure goes to the check's table).
  if (properties->collectives.rfind("nccl ", 0) == 0) {
    absl::StatusOr<std::unique_ptr<Client>> second = Client::Connect(daemon_->address(), options);
    ASSERT_OK(second);
    absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(*(*second), 4096, kDevice);
    ASSERT_OK(buffer);
    const TensorRef tensor{&*buffer, 0, Dtype::kFloat32, {1024}, kDevice};
    const absl::Time start = absl::Now();
    ASSERT_OK(nccl::AllReduce(*(*second), {tensor}, ReduceOp::kSum).status());
    ASSERT_OK((*second)->Synchronize(kDevice));
    std::printf("nccl_all_reduce_second_session_first_call_ms=%.3f\n",
                absl::ToDoubleMilliseconds(absl::Now() - start));
  }
}

// The figure: a client holding 4 GiB is SIGKILLed; within a second of
// the daemon's cleanup, cudaMemGetInfo is back where it started.
TEST_P(GpuDaemonTest, SigkilledClientsMemoryReturnsWithinOneSecond) {
  const uint64_t bytes = uint64_t{4} << 30;
  client_.reset();  // only the hog's session from here on
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaFree(nullptr), cudaSuccess);  // this process's context first
  size_t baseline = 0;
  size_t total = 0;
  ASSERT_EQ(cudaMemGetInfo(&baseline, &total), cudaSuccess);
  Child hog(ChildProgram(), {"hog", daemon_->address(), absl::StrCat(bytes)});
  ASSERT_EQ(hog.ReadLine(), "ready");
  size_t during = 0;
  ASSERT_EQ(cudaMemGetInfo(&during, &total), cudaSuccess);
  EXPECT_LE(during + bytes, baseline);
  ASSERT_EQ(SessionCount(), 1);

  ASSERT_EQ(kill(hog.pid(), SIGKILL), 0);
  const absl::Time killed = absl::Now();
  hog.Wait();
  while (SessionCount() != 0 && absl::Now() - killed < absl::Seconds(10))
    absl::SleepFor(absl::Milliseconds(1));
  const absl::Time cleaned = absl::Now();
  ASSERT_EQ(SessionCount(), 0);
  size_t free = 0;
  // A little slack for what the driver keeps between processes.
  const size_t slack = 64 * kMiB;
  while (absl::Now() - cleaned < absl::Seconds(10)) {
    ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
    if (free + slack >= baseline) break;
    absl::SleepFor(absl::Milliseconds(1));
  }
  const absl::Time back = absl::Now();
  std::printf("sigkill_cleanup_ms=%.1f\nsigkill_memory_back_after_cleanup_ms=%.1f\n",
              absl::ToDoubleMilliseconds(cleaned - killed),
              absl::ToDoubleMilliseconds(back - cleaned));
  EXPECT_GE(free + slack, baseline);
  EXPECT_LT(back - cleaned, absl::Seconds(1));
}

// Compact mode's pages: each allocation maps new 2 MiB pages in the daemon
// (cuMemCreate) and in this process (imported from their descriptors); this
// process's kernels and the daemon's copies see the same bytes; freed and
// given back with empty_cache, the pages leave both processes and the device
// memory is free again within a second. Prints what mapping a page costs.
TEST_P(GpuDaemonTest, ExpandablePagesMapAndReturn) {
  if (!compact()) GTEST_SKIP() << "pages are compact mode's";
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaFree(nullptr), cudaSuccess);
  size_t baseline = 0;
  size_t total = 0;
  ASSERT_EQ(cudaMemGetInfo(&baseline, &total), cudaSuccess);
  constexpr int kChunks = 64;
  constexpr uint64_t kChunk = 16 * kMiB;  // 8 pages each
  std::vector<DeviceBuffer> chunks;
  const absl::Time start = absl::Now();
  for (int i = 0; i < kChunks; ++i) {
    absl::StatusOr<DeviceBuffer> chunk = memory::Allocate(*client_, kChunk, kDevice);
    ASSERT_OK(chunk);
    ASSERT_NE(chunk->data(), nullptr);
    chunks.push_back(*std::move(chunk));
  }
  const double per_page_us =
      absl::ToDoubleMicroseconds(absl::Now() - start) / (kChunks * kChunk / (2 * kMiB));
  std::printf("compact_allocate_new_pages_us_per_2mib_page=%.1f\n", per_page_us);
  absl::StatusOr<std::map<std::string, int64_t>> stats = memory::MemoryStats(*client_, kDevice);
  ASSERT_OK(stats);
  EXPECT_GE(stats->at("reserved_bytes.all.current"), static_cast<int64_t>(kChunks * kChunk));
  size_t during = 0;
  ASSERT_EQ(cudaMemGetInfo(&during, &total), cudaSuccess);
  EXPECT_LE(during + kChunks * kChunk, baseline);
  for (int i = 0; i < kChunks; ++i) {
    ASSERT_EQ(testing::LaunchWritePattern(static_cast<uint32_t*>(chunks[i].data()), kChunk / 4,
                                          100 + i, nullptr),
              cudaSuccess);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (int i : {0, kChunks / 2, kChunks - 1}) {
    std::vector<uint32_t> back(kChunk / 4);
    ASSERT_OK(copy::DeviceToHost(*client_, back.data(), chunks[i], 0, kChunk).status());
    uint64_t mismatches = 0;
    for (uint64_t w = 0; w < back.size(); ++w)
      mismatches += back[w] != testing::PatternWord(w, 100 + i);
    EXPECT_EQ(mismatches, 0u) << "chunk " << i;
  }
  chunks.clear();
  ASSERT_OK(memory::FlushFrees(*client_));
  ASSERT_OK(memory::EmptyCache(*client_).status());
  const absl::Time emptied = absl::Now();
  size_t free = 0;
  const size_t slack = 64 * kMiB;
  while (absl::Now() - emptied < absl::Seconds(10)) {
    ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
    if (free + slack >= baseline) break;
    absl::SleepFor(absl::Milliseconds(1));
  }
  std::printf("compact_pages_back_after_empty_cache_ms=%.1f\n",
              absl::ToDoubleMilliseconds(absl::Now() - emptied));
  EXPECT_GE(free + slack, baseline);
  EXPECT_LT(absl::Now() - emptied, absl::Seconds(1));
}

std::string AllocatorName(const ::testing::TestParamInfo<std::string>& allocator) {
  return allocator.param;
}

INSTANTIATE_TEST_SUITE_P(Allocators, GpuDaemonTest, ::testing::Values("default", "compact"),
                         AllocatorName);

}  // namespace
}  // namespace gpumux
