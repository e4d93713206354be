// CudaBackend on a real GPU: the DeviceBackend conformance suite, plus what
// only CUDA has (release grace, own interprocess events, sticky errors,
// device properties, expandable segments of cuMemCreate pages). Skips where no CUDA device is
// visible.

#include "server/backend/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "common/base/status_macros.h"
#include "common/cuda/cuda_vmm.h"
#include "common/tensor/rng_fill.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/backend/device_backend_conformance.h"
#include "tests/gpu/test_kernels.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::StatusIs;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = uint64_t{1} << 20;

#define GPUMUX_REQUIRE_GPU() \
  if (CudaBackend::VisibleDeviceCount() == 0) GTEST_SKIP() << "no CUDA device is visible"

// Reads and writes a segment with cudaMemcpy (this process allocated it).
class CudaSegmentView final : public testing::SegmentView {
 public:
  explicit CudaSegmentView(const BackendSegment& segment) : segment_(segment) {}
  absl::Status Read(uint64_t offset, void* out, uint64_t size) override {
    GPUMUX_RETURN_IF_ERROR(Check(offset, size));
    return Cuda(cudaMemcpy(out, reinterpret_cast<const void*>(segment_.address + offset), size,
                           cudaMemcpyDeviceToHost));
  }
  absl::Status Write(uint64_t offset, const void* data, uint64_t size) override {
    GPUMUX_RETURN_IF_ERROR(Check(offset, size));
    // From pageable memory cudaMemcpy may return before the bytes land, and
    // the backend's streams are not ordered after the legacy stream.
    GPUMUX_RETURN_IF_ERROR(Cuda(cudaMemcpy(reinterpret_cast<void*>(segment_.address + offset), data,
                                           size, cudaMemcpyHostToDevice)));
    return Cuda(cudaDeviceSynchronize());
  }

 private:
  absl::Status Check(uint64_t offset, uint64_t size) const {
    if (offset > segment_.size || size > segment_.size - offset)
      return absl::OutOfRangeError("past the segment");
    return absl::OkStatus();
  }
  static absl::Status Cuda(cudaError_t error) {
    if (error == cudaSuccess) return absl::OkStatus();
    return absl::InternalError(cudaGetErrorName(error));
  }
  BackendSegment segment_;
};

absl::StatusOr<std::unique_ptr<CudaBackend>> MakeBackend(
    absl::Duration release_grace = absl::ZeroDuration()) {
  CudaBackend::Options options;
  options.release_grace = release_grace;
  return CudaBackend::Create(options);
}

struct CudaBackendFactory {
  // UNAVAILABLE (the suite skips) only where no device is visible; any other
  // failure to start fails the suite.
  static absl::StatusOr<std::unique_ptr<DeviceBackend>> Create() {
    if (CudaBackend::VisibleDeviceCount() == 0)
      return absl::UnavailableError("no CUDA device is visible");
    absl::StatusOr<std::unique_ptr<CudaBackend>> backend = MakeBackend();
    if (!backend.ok()) return absl::InternalError(backend.status().ToString());
    return std::unique_ptr<DeviceBackend>(*std::move(backend));
  }
  static absl::StatusOr<std::unique_ptr<testing::SegmentView>> View(
      const DeviceBackend& /*backend*/, const BackendSegment& segment) {
    return std::unique_ptr<testing::SegmentView>(new CudaSegmentView(segment));
  }
};

TEST(CudaBackendTest, DescribesTheDeviceAsTorchDoes) {
  GPUMUX_REQUIRE_GPU();
  absl::StatusOr<std::unique_ptr<CudaBackend>> backend = MakeBackend();
  ASSERT_OK(backend);
  const DeviceInfo& info = (*backend)->device_info(DeviceIndex(0));
  cudaDeviceProp prop;
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT_EQ(info.name, prop.name);
  EXPECT_EQ(info.total_memory, prop.totalGlobalMem);
  EXPECT_EQ(info.major, prop.major);
  EXPECT_EQ(info.minor, prop.minor);
  EXPECT_EQ(info.multi_processor_count, prop.multiProcessorCount);
  EXPECT_THAT(info.pci_bus_id,
              ::testing::MatchesRegex("[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\\.[0-9]"));
  EXPECT_THAT(info.arch_list, ::testing::Contains("sm_90"));
  EXPECT_THAT(info.arch_list, ::testing::Contains("compute_90"));
  EXPECT_THAT(info.gencode_flags, HasSubstr("-gencode compute=compute_90,code=sm_90"));
  EXPECT_GE(info.driver_version, 13000);
  EXPECT_GE(info.runtime_version, 13000);
  const StreamPriorityRange range = (*backend)->GetStreamPriorityRange(DeviceIndex(0));
  EXPECT_LT(range.greatest, range.least);
  EXPECT_OK((*backend)->DeviceHealth(DeviceIndex(0)));
  EXPECT_THAT((*backend)->DeviceHealth(DeviceIndex((*backend)->device_count())),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// cudaFree waits out the grace, so a client told to unmap can close its
// mapping first; the handle opens until then, FreeMemory counts the bytes.
// (The grace is long enough for a peer process to start CUDA within it.)
TEST(CudaBackendTest, ReleasedSegmentIsFreedAfterTheGrace) {
  GPUMUX_REQUIRE_GPU();
  const absl::Duration grace = absl::Seconds(3);
  absl::StatusOr<std::unique_ptr<CudaBackend>> backend = MakeBackend(grace);
  ASSERT_OK(backend);
  const DeviceIndex device(0);
  const uint64_t free_before = *(*backend)->FreeMemory(device);
  absl::StatusOr<BackendSegment> segment = (*backend)->AllocateSegment(device, 64 * kMiB);
  ASSERT_OK(segment);
  EXPECT_LE(*(*backend)->FreeMemory(device) + 64 * kMiB, free_before);
  ASSERT_OK((*backend)->ReleaseSegment(device, segment->address));
  const absl::Time released = absl::Now();
  EXPECT_EQ(*(*backend)->FreeMemory(device), free_before);
  EXPECT_THAT((*backend)->ReleaseSegment(device, segment->address),
              StatusIs(absl::StatusCode::kNotFound));
  const int early = testing::RunPeerGone(**backend, segment->handle);
  if (absl::Now() - released < grace) {
    EXPECT_EQ(early, testing::kPeerStillOpenable);
  }
  while (testing::RunPeerGone(**backend, segment->handle) != testing::kPeerOk &&
         absl::Now() - released < grace * 3) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(testing::RunPeerGone(**backend, segment->handle), testing::kPeerOk);
  EXPECT_GE(absl::Now() - released, grace);
  // The peers' contexts are torn down by the driver after they exit: wait
  // for their memory before comparing.
  const absl::Time settle = absl::Now() + absl::Seconds(5);
  while (*(*backend)->FreeMemory(device) != free_before && absl::Now() < settle) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(*(*backend)->FreeMemory(device), free_before);
}

// A tenant that needs the memory does not wait for the grace.
TEST(CudaBackendTest, FullDeviceFreesRetiringSegmentsAtOnce) {
  GPUMUX_REQUIRE_GPU();
  absl::StatusOr<std::unique_ptr<CudaBackend>> backend = MakeBackend(absl::Hours(1));
  ASSERT_OK(backend);
  const DeviceIndex device(0);
  const uint64_t big = (*(*backend)->FreeMemory(device) - 1024 * kMiB) / (2 * kMiB) * (2 * kMiB);
  absl::StatusOr<BackendSegment> first = (*backend)->AllocateSegment(device, big);
  ASSERT_OK(first);
  ASSERT_OK((*backend)->ReleaseSegment(device, first->address));
  const absl::Time start = absl::Now();
  absl::StatusOr<BackendSegment> second = (*backend)->AllocateSegment(device, big);
  ASSERT_OK(second);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_OK((*backend)->ReleaseSegment(device, second->address));
}

// Expandable segments: a reserved range's pages are cuMemCreate memory,
// mapped whole, zeroed and counted as used; work may name mapped pages only;
// each page's descriptor (filed in the memory-file table) imports back into
// the same memory mapped elsewhere; unmapped and released, the memory is
// free again.
TEST(CudaBackendTest, ExpandableRangesMapPagesOthersCanImport) {
  GPUMUX_REQUIRE_GPU();
  MemoryFileTable files;
  CudaBackend::Options options;
  options.release_grace = absl::ZeroDuration();
  options.memory_files = &files;
  absl::StatusOr<std::unique_ptr<CudaBackend>> made = CudaBackend::Create(options);
  ASSERT_OK(made);
  CudaBackend& b = **made;
  if (!b.SupportsExpandableSegments()) GTEST_SKIP() << b.expandable_segments_status();
  const DeviceIndex device(0);
  const uint64_t free_before = *b.FreeMemory(device);
  absl::StatusOr<BackendRange> range =
      b.ReserveRange(device, 1024 * kMiB, 2 * kMiB, StreamId(1), false);
  ASSERT_OK(range);
  EXPECT_EQ(range->handle.kind, SegmentHandle::Kind::kCudaPages);
  EXPECT_EQ(range->handle.pci_bus_id, b.device_info(device).pci_bus_id);
  EXPECT_GE(*b.FreeMemory(device) + 2 * kMiB, free_before);  // addresses cost no memory
  ASSERT_OK(b.MapPages(device, range->address, 8 * kMiB));
  EXPECT_LE(*b.FreeMemory(device) + 8 * kMiB, free_before);
  EXPECT_THAT(b.MapPages(device, range->address + 6 * kMiB, 2 * kMiB),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(b.MapPages(device, range->address + kMiB, 2 * kMiB),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // New pages are zero; work on them runs, work past them is refused.
  std::vector<uint8_t> back(8 * kMiB, 0xff);
  ASSERT_EQ(cudaMemcpy(back.data(), reinterpret_cast<void*>(range->address), back.size(),
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(std::count(back.begin(), back.end(), 0), static_cast<long>(back.size()));
  absl::StatusOr<BackendStream> stream = b.CreateStream(device, 0);
  ASSERT_OK(stream);
  ASSERT_OK(b.Memset(*stream, range->address + kMiB, 0x5a, 6 * kMiB));
  EXPECT_THAT(b.Memset(*stream, range->address + 7 * kMiB, 0, 2 * kMiB),
              StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_OK(b.SynchronizeStream(*stream));
  // The descriptor of the page at 2 MiB, imported and mapped at other
  // addresses: the same bytes.
  absl::StatusOr<std::vector<PageHandle>> pages =
      b.PageHandles(device, range->address + 2 * kMiB, 3 * kMiB);
  ASSERT_OK(pages);
  ASSERT_EQ(pages->size(), 2u);
  EXPECT_EQ((*pages)[0].offset, 2 * kMiB);
  EXPECT_EQ((*pages)[1].offset, 4 * kMiB);
  absl::StatusOr<FiledDescriptor> filed = files.Open((*pages)[0].key, MemoryFileTable::kAnySession);
  ASSERT_OK(filed);
  EXPECT_EQ(filed->size, 2 * kMiB);
  absl::StatusOr<cuda_vmm::PhysicalHandle> imported = cuda_vmm::Import(filed->fd());
  ASSERT_OK(imported);
  absl::StatusOr<uint64_t> elsewhere = cuda_vmm::ReserveAddresses(2 * kMiB, 2 * kMiB);
  ASSERT_OK(elsewhere);
  ASSERT_OK(cuda_vmm::Map(*elsewhere, 2 * kMiB, *imported, {0}));
  ASSERT_OK(cuda_vmm::Release(*imported));
  std::vector<uint8_t> page(2 * kMiB);
  ASSERT_EQ(cudaMemcpy(page.data(), reinterpret_cast<void*>(*elsewhere), page.size(),
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(std::count(page.begin(), page.end(), 0x5a), static_cast<long>(page.size()));
  ASSERT_OK(cuda_vmm::Unmap(*elsewhere, 2 * kMiB));
  ASSERT_OK(cuda_vmm::FreeAddresses(*elsewhere, 2 * kMiB));
  // Unmapped, a page's key is gone from the table.
  ASSERT_OK(b.UnmapPages(device, range->address + 2 * kMiB, 2 * kMiB));
  EXPECT_THAT(files.Open((*pages)[0].key, MemoryFileTable::kAnySession),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(b.PageHandles(device, range->address + 2 * kMiB, 2 * kMiB),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(b.UnmapPages(device, range->address + 2 * kMiB, 2 * kMiB),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_OK(b.DestroyStream(*stream));
  ASSERT_OK(b.ReleaseRange(device, range->address));  // with its mapped pages
  EXPECT_EQ(files.size(), 0u);
  EXPECT_THAT(b.ReleaseRange(device, range->address), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_GE(*b.FreeMemory(device) + 2 * kMiB, free_before);
}

// With paged segments (gpumuxd in expandable mode) a segment is a range of
// one page: it reaches other processes by descriptor, not by CUDA IPC.
TEST(CudaBackendTest, PagedSegmentsAreRangesOfOnePage) {
  GPUMUX_REQUIRE_GPU();
  MemoryFileTable files;
  CudaBackend::Options options;
  options.memory_files = &files;
  options.paged_segments = true;
  absl::StatusOr<std::unique_ptr<CudaBackend>> made = CudaBackend::Create(options);
  ASSERT_OK(made);
  CudaBackend& b = **made;
  if (!b.SupportsExpandableSegments()) GTEST_SKIP() << b.expandable_segments_status();
  const DeviceIndex device(0);
  EXPECT_THAT(b.AllocateSegment(device, 3 * kMiB),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("multiple of 2 MiB")));
  absl::StatusOr<BackendSegment> segment = b.AllocateSegment(device, 4 * kMiB);
  ASSERT_OK(segment);
  EXPECT_EQ(segment->handle.kind, SegmentHandle::Kind::kCudaPages);
  EXPECT_EQ(segment->size, 4 * kMiB);
  absl::StatusOr<std::vector<PageHandle>> pages = b.PageHandles(device, segment->address, 4 * kMiB);
  ASSERT_OK(pages);
  ASSERT_EQ(pages->size(), 1u);
  EXPECT_EQ((*pages)[0].size, 4 * kMiB);
  EXPECT_EQ(files.size(), 1u);
  ASSERT_OK(b.ReleaseSegment(device, segment->address));
  EXPECT_EQ(files.size(), 0u);
  EXPECT_THAT(b.ReleaseSegment(device, segment->address), StatusIs(absl::StatusCode::kNotFound));
}

// CUDA cannot open an interprocess event in the process that created it;
// the backend shares its own instead (one daemon serves both sessions).
TEST(CudaBackendTest, OwnInterprocessEventOpensByHandle) {
  GPUMUX_REQUIRE_GPU();
  absl::StatusOr<std::unique_ptr<CudaBackend>> backend = MakeBackend();
  ASSERT_OK(backend);
  CudaBackend& b = **backend;
  const DeviceIndex device(0);
  EventFlags ipc;
  ipc.interprocess = true;
  absl::StatusOr<BackendEvent> event = b.CreateEvent(device, ipc);
  absl::StatusOr<BackendStream> stream = b.CreateStream(device, 0);
  ASSERT_OK(event);
  ASSERT_OK(stream);
  absl::StatusOr<std::string> handle = b.GetIpcEventHandle(*event);
  ASSERT_OK(handle);
  absl::StatusOr<BackendEvent> opened = b.OpenIpcEventHandle(device, *handle);
  ASSERT_OK(opened);
  EXPECT_NE(opened->value(), event->value());
  absl::StatusOr<BackendSegment> segment = b.AllocateSegment(device, 256 * kMiB);
  ASSERT_OK(segment);
  ASSERT_OK(b.Memset(*stream, segment->address, 7, segment->size));
  ASSERT_OK(b.RecordEvent(*event, *stream));
  EXPECT_OK(b.SynchronizeEvent(*opened));
  EXPECT_THAT(b.QueryEvent(*opened), testing::IsOkWith(true));
  // Each handle is destroyed on its own; the event lives while one remains.
  ASSERT_OK(b.DestroyEvent(*event));
  EXPECT_OK(b.SynchronizeEvent(*opened));
  EXPECT_OK(b.DestroyEvent(*opened));
  EXPECT_OK(b.ReleaseSegment(device, segment->address));
}

// Every dtype, uniform and raw bits, a million elements: the same bits as
// the host generator; normal samples within a few ulp (philox.h).
TEST(CudaBackendTest, RandomFillsMatchTheHostBitForBit) {
  GPUMUX_REQUIRE_GPU();
  absl::StatusOr<std::unique_ptr<CudaBackend>> backend = MakeBackend();
  ASSERT_OK(backend);
  CudaBackend& b = **backend;
  const DeviceIndex device(0);
  absl::StatusOr<BackendSegment> segment = b.AllocateSegment(device, 16 * kMiB);
  absl::StatusOr<BackendStream> stream = b.CreateStream(device, 0);
  ASSERT_OK(segment);
  ASSERT_OK(stream);
  const uint64_t n = 1000003;
  const RngDtype dtypes[] = {RngDtype::kF32, RngDtype::kF64, RngDtype::kF16, RngDtype::kBF16,
                             RngDtype::kI32, RngDtype::kI64, RngDtype::kU8};
  uint64_t offset = 0;
  for (RngDtype dtype : dtypes) {
    const bool is_int =
        dtype == RngDtype::kI32 || dtype == RngDtype::kI64 || dtype == RngDtype::kU8;
    for (RngKind kind : {RngKind::kUniform, RngKind::kBits}) {
      RngRequest request{dtype, kind, n, is_int ? 0.0 : -1.0, is_int ? 100.0 : 1.0};
      SCOPED_TRACE(::testing::Message()
                   << "dtype " << static_cast<int>(dtype) << " kind " << static_cast<int>(kind));
      const std::vector<uint8_t> expected = testing::ExpectedRandomBytes(request, 42, offset);
      ASSERT_OK(b.FillRandom(*stream, segment->address, request, 42, offset));
      std::vector<uint8_t> back(expected.size());
      ASSERT_OK(b.CopyDeviceToHost(*stream, back.data(), segment->address, back.size(), nullptr));
      ASSERT_OK(b.SynchronizeStream(*stream));
      EXPECT_TRUE(back == expected);
      offset += RngOffsetIncrement(request);
    }
  }
  const RngRequest normal{RngDtype::kF32, RngKind::kNormal, n, 0.0, 1.0};
  std::vector<float> expected(n);
  FillRandom(expected.data(), normal, 42, offset);
  ASSERT_OK(b.FillRandom(*stream, segment->address, normal, 42, offset));
  std::vector<float> back(n);
  ASSERT_OK(b.CopyDeviceToHost(*stream, back.data(), segment->address, n * sizeof(float), nullptr));
  ASSERT_OK(b.SynchronizeStream(*stream));
  uint64_t far = 0;
  for (uint64_t i = 0; i < n; ++i)
    far += std::abs(back[i] - expected[i]) > 1e-5f * std::max(1.0f, std::abs(expected[i]));
  EXPECT_EQ(far, 0u);
}

// A kernel fault loses the context: the device reports unhealthy, calls on
// it fail fast with UNAVAILABLE, and nothing crashes. Runs in a child
// process, whose context the fault destroys.
// No CUDA call may precede the fork: a child cannot use CUDA initialized by
// its parent.
TEST(CudaBackendTest, StickyErrorMarksTheDeviceUnhealthy) {
  constexpr int kNoDevice = 77;
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (CudaBackend::VisibleDeviceCount() == 0) _exit(kNoDevice);
    absl::StatusOr<std::unique_ptr<CudaBackend>> backend = MakeBackend();
    if (!backend.ok()) _exit(10);
    CudaBackend& b = **backend;
    const DeviceIndex device(0);
    absl::StatusOr<BackendStream> stream = b.CreateStream(device, 0);
    if (!stream.ok() || !b.DeviceHealth(device).ok()) _exit(11);
    if (cudaSetDevice(0) != cudaSuccess || testing::LaunchFault(nullptr) != cudaSuccess) _exit(12);
    cudaDeviceSynchronize();  // the fault surfaces
    absl::Status status = b.SynchronizeStream(*stream);
    if (!absl::IsUnavailable(status)) _exit(13);
    absl::Status health = b.DeviceHealth(device);
    if (!absl::IsUnavailable(health) || health.message().find("unhealthy") == std::string::npos)
      _exit(14);
    // Later calls fail fast, with the same reason.
    if (!absl::IsUnavailable(b.AllocateSegment(device, 2 * kMiB).status())) _exit(15);
    if (!absl::IsUnavailable(b.FreeMemory(device).status()))
      _exit(16);  // an error, not a made-up 0
    _exit(0);
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus)) << "the child crashed";
  if (WEXITSTATUS(wstatus) == kNoDevice) GTEST_SKIP() << "no CUDA device is visible";
  EXPECT_EQ(WEXITSTATUS(wstatus), 0) << "exit code names the failed step in the test";
}

}  // namespace

namespace testing {
INSTANTIATE_TYPED_TEST_SUITE_P(Cuda, DeviceBackendConformanceTest,
                               ::testing::Types<CudaBackendFactory>);
}  // namespace testing

}  // namespace gpumux
