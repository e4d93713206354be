#include "server/backend/host/host_backend.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/backend/memory_file_table.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "tests/backend/device_backend_conformance.h"
#include "tests/backend/segment_peer.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::IsOkAndHolds;
using ::gpumux::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kBase = 0x7f0000000000;
constexpr uint64_t kDeviceSpan = uint64_t{1} << 42;

// The segment's memory file mapped into the test process, as a client maps
// what the memory socket hands it.
class HostSegmentView final : public testing::SegmentView {
 public:
  static absl::StatusOr<std::unique_ptr<testing::SegmentView>> Map(const DeviceBackend& backend,
                                                                   const BackendSegment& segment) {
    std::shared_ptr<const SealedMemory> memory = testing::PeerMemoryFile(backend, segment.handle);
    if (memory == nullptr) return absl::NotFoundError("the segment's key is not filed");
    void* mapped = mmap(nullptr, segment.size, PROT_READ | PROT_WRITE, MAP_SHARED, memory->fd(), 0);
    if (mapped == MAP_FAILED) return absl::ErrnoToStatus(errno, "mmap");
    return std::unique_ptr<testing::SegmentView>(
        new HostSegmentView(static_cast<uint8_t*>(mapped), segment.size));
  }
  ~HostSegmentView() override { munmap(bytes_, size_); }

  absl::Status Read(uint64_t offset, void* out, uint64_t size) override {
    GPUMUX_RETURN_IF_ERROR(Check(offset, size));
    std::memcpy(out, bytes_ + offset, size);
    return absl::OkStatus();
  }
  absl::Status Write(uint64_t offset, const void* data, uint64_t size) override {
    GPUMUX_RETURN_IF_ERROR(Check(offset, size));
    std::memcpy(bytes_ + offset, data, size);
    return absl::OkStatus();
  }

 private:
  HostSegmentView(uint8_t* bytes, uint64_t size) : bytes_(bytes), size_(size) {}
  absl::Status Check(uint64_t offset, uint64_t size) const {
    if (offset > size_ || size > size_ - offset) return absl::OutOfRangeError("past the segment");
    return absl::OkStatus();
  }

  uint8_t* bytes_;
  uint64_t size_;
};

HostBackend::Options TestOptions(uint64_t device_memory = 256 * kMiB) {
  HostBackend::Options options;
  options.device_count = 2;
  options.device_memory = device_memory;
  return options;
}

std::unique_ptr<HostBackend> MakeBackend(uint64_t device_memory = 256 * kMiB) {
  absl::StatusOr<std::unique_ptr<HostBackend>> backend =
      HostBackend::Create(TestOptions(device_memory));
  EXPECT_OK(backend);
  return backend.ok() ? *std::move(backend) : nullptr;
}

struct HostBackendFactory {
  static absl::StatusOr<std::unique_ptr<DeviceBackend>> Create() {
    GPUMUX_ASSIGN_OR_RETURN(std::unique_ptr<HostBackend> backend,
                            HostBackend::Create(TestOptions()));
    return std::unique_ptr<DeviceBackend>(std::move(backend));
  }
  static absl::StatusOr<std::unique_ptr<testing::SegmentView>> View(const DeviceBackend& backend,
                                                                    const BackendSegment& segment) {
    return HostSegmentView::Map(backend, segment);
  }
};

// Entries of /dev/shm whose name contains `text`.
int DevShmEntriesContaining(const std::string& text) {
  int found = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    found += entry.path().filename().string().find(text) != std::string::npos;
  }
  return found;
}

}  // namespace

namespace testing {
INSTANTIATE_TYPED_TEST_SUITE_P(Host, DeviceBackendConformanceTest,
                               ::testing::Types<HostBackendFactory>);
}  // namespace testing

namespace {

TEST(HostBackendTest, RejectsBadOptions) {
  HostBackend::Options options = TestOptions();
  options.device_count = 0;
  EXPECT_THAT(HostBackend::Create(options), StatusIs(absl::StatusCode::kInvalidArgument));
  options = TestOptions(2 * kMiB - 512);
  EXPECT_THAT(HostBackend::Create(options), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_OK(HostBackend::Create(TestOptions(2 * kMiB)));
}

TEST(HostBackendTest, DescribesEmulatedDevices) {
  std::unique_ptr<HostBackend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(backend->name(), "host");
  ASSERT_EQ(backend->device_count(), 2);
  const DeviceInfo& info = backend->device_info(DeviceIndex(1));
  EXPECT_EQ(info.name, "gpumux host device 1");
  EXPECT_EQ(info.total_memory, 256 * kMiB);
  EXPECT_EQ(info.major, 0);
  EXPECT_EQ(info.minor, 0);
  EXPECT_EQ(info.multi_processor_count, static_cast<int>(std::thread::hardware_concurrency()));
  EXPECT_THAT(backend->FreeMemory(DeviceIndex(1)), IsOkAndHolds(256 * kMiB));
}

TEST(HostBackendTest, SegmentsAreSealedBackedMemoryFilesUnderUnguessableKeys) {
  std::unique_ptr<HostBackend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  const int shm_before = DevShmEntriesContaining("gpumux");
  absl::StatusOr<BackendSegment> first = backend->AllocateSegment(DeviceIndex(1), 4 * kMiB);
  ASSERT_OK(first);
  absl::StatusOr<BackendSegment> second = backend->AllocateSegment(DeviceIndex(1), 512);
  ASSERT_OK(second);
  EXPECT_EQ(first->handle.kind, SegmentHandle::Kind::kHostMemfd);
  EXPECT_THAT(first->handle.data, MatchesRegex("[0-9a-f]{32}"));
  EXPECT_THAT(second->handle.data, MatchesRegex("[0-9a-f]{32}"));
  EXPECT_NE(first->handle.data, second->handle.data);
  // Nothing anyone could open by name.
  EXPECT_EQ(DevShmEntriesContaining("gpumux"), shm_before);
  EXPECT_EQ(DevShmEntriesContaining(first->handle.data), 0);

  std::shared_ptr<const SealedMemory> memory = testing::PeerMemoryFile(*backend, first->handle);
  ASSERT_NE(memory, nullptr);
  struct stat st;
  ASSERT_EQ(fstat(memory->fd(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), 4 * kMiB);
  // Backed in full at allocation: no later touch can find the memory missing.
  EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, 4 * kMiB);
  EXPECT_EQ(fcntl(memory->fd(), F_GET_SEALS) & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
            F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  // A client holding the descriptor cannot truncate it under the daemon.
  EXPECT_NE(ftruncate(memory->fd(), 0), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(ftruncate(memory->fd(), 8 * kMiB), 0);
  ASSERT_OK(
      backend->Memset(*backend->CreateStream(DeviceIndex(1), 0), first->address, 0xab, 4 * kMiB));
  ASSERT_OK(backend->Synchronize(DeviceIndex(1)));
}

TEST(HostBackendTest, EnforcesDeviceMemoryExactly) {
  std::unique_ptr<HostBackend> backend = MakeBackend(64 * kMiB);
  ASSERT_NE(backend, nullptr);
  absl::StatusOr<BackendSegment> big = backend->AllocateSegment(DeviceIndex(0), 64 * kMiB - 512);
  ASSERT_OK(big);
  EXPECT_THAT(backend->FreeMemory(DeviceIndex(0)), IsOkAndHolds(512u));
  absl::StatusOr<BackendSegment> last = backend->AllocateSegment(DeviceIndex(0), 512);
  ASSERT_OK(last);
  EXPECT_THAT(backend->FreeMemory(DeviceIndex(0)), IsOkAndHolds(0u));
  EXPECT_THAT(backend->AllocateSegment(DeviceIndex(0), 1024),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       "host device 0: cannot allocate 1024 bytes: 0 of 67108864 bytes free"));
  // The other device is untouched.
  EXPECT_OK(backend->AllocateSegment(DeviceIndex(1), 64 * kMiB));
  ASSERT_OK(backend->ReleaseSegment(DeviceIndex(0), last->address));
  EXPECT_THAT(
      backend->AllocateSegment(DeviceIndex(0), 1024),
      StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("512 of 67108864 bytes free")));
}

TEST(HostBackendTest, SmallSegmentsDoNotUseUpTheLimitThroughAlignment) {
  // 200 segments of 512 bytes take 400 MiB of emulated addresses but only
  // 100 KiB of the 64 MiB limit.
  std::unique_ptr<HostBackend> backend = MakeBackend(64 * kMiB);
  ASSERT_NE(backend, nullptr);
  for (int i = 0; i < 200; ++i) {
    ASSERT_OK(backend->AllocateSegment(DeviceIndex(0), 512)) << i;
  }
  EXPECT_THAT(backend->FreeMemory(DeviceIndex(0)), IsOkAndHolds(64 * kMiB - 200 * 512));
}

TEST(HostBackendTest, AddressesAreAlignedPerDeviceAndLowestFirst) {
  std::unique_ptr<HostBackend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  absl::StatusOr<BackendSegment> a = backend->AllocateSegment(DeviceIndex(0), 512);
  absl::StatusOr<BackendSegment> b = backend->AllocateSegment(DeviceIndex(0), 2 * kMiB + 512);
  absl::StatusOr<BackendSegment> c = backend->AllocateSegment(DeviceIndex(0), 2 * kMiB);
  absl::StatusOr<BackendSegment> d1 = backend->AllocateSegment(DeviceIndex(1), 512);
  ASSERT_OK(a);
  ASSERT_OK(b);
  ASSERT_OK(c);
  ASSERT_OK(d1);
  EXPECT_EQ(a->address, kBase);
  EXPECT_EQ(b->address, kBase + 2 * kMiB);
  EXPECT_EQ(c->address, kBase + 6 * kMiB);
  EXPECT_EQ(d1->address, kBase + kDeviceSpan);
}

TEST(HostBackendTest, CoalescesReleasedNeighboursInEitherOrder) {
  std::unique_ptr<HostBackend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  const DeviceIndex dev(0);
  absl::StatusOr<BackendSegment> a = backend->AllocateSegment(dev, 2 * kMiB);
  absl::StatusOr<BackendSegment> b = backend->AllocateSegment(dev, 2 * kMiB);
  absl::StatusOr<BackendSegment> c = backend->AllocateSegment(dev, 2 * kMiB);
  absl::StatusOr<BackendSegment> d = backend->AllocateSegment(dev, 2 * kMiB);
  ASSERT_OK(a);
  ASSERT_OK(b);
  ASSERT_OK(c);
  ASSERT_OK(d);
  // b then a: the freed range merges with its successor.
  ASSERT_OK(backend->ReleaseSegment(dev, b->address));
  ASSERT_OK(backend->ReleaseSegment(dev, a->address));
  absl::StatusOr<BackendSegment> ab = backend->AllocateSegment(dev, 4 * kMiB);
  ASSERT_OK(ab);
  EXPECT_EQ(ab->address, a->address);
  // c then the 4 MiB range before it (merges with its predecessor), then d
  // between the freed range and the untouched rest of the space.
  ASSERT_OK(backend->ReleaseSegment(dev, ab->address));
  ASSERT_OK(backend->ReleaseSegment(dev, c->address));
  ASSERT_OK(backend->ReleaseSegment(dev, d->address));
  absl::StatusOr<BackendSegment> all = backend->AllocateSegment(dev, 10 * kMiB);
  ASSERT_OK(all);
  EXPECT_EQ(all->address, kBase);
}

TEST(HostBackendTest, UnknownSegmentsAndDevicesAreRejected) {
  std::unique_ptr<HostBackend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  EXPECT_THAT(backend->ReleaseSegment(DeviceIndex(0), kBase),
              StatusIs(absl::StatusCode::kNotFound));
  absl::StatusOr<BackendSegment> segment = backend->AllocateSegment(DeviceIndex(0), 512);
  ASSERT_OK(segment);
  // Right address, wrong device.
  EXPECT_THAT(backend->ReleaseSegment(DeviceIndex(1), segment->address),
              StatusIs(absl::StatusCode::kNotFound));
  ASSERT_OK(backend->ReleaseSegment(DeviceIndex(0), segment->address));
  EXPECT_THAT(backend->ReleaseSegment(DeviceIndex(0), segment->address),
              StatusIs(absl::StatusCode::kNotFound));
  for (int bad : {-1, 2}) {
    EXPECT_THAT(backend->AllocateSegment(DeviceIndex(bad), 512),
                StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(backend->ReleaseSegment(DeviceIndex(bad), kBase),
                StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(backend->Synchronize(DeviceIndex(bad)),
                StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(backend->FreeMemory(DeviceIndex(bad)), StatusIs(absl::StatusCode::kInvalidArgument))
        << "a device out of range has no free memory to report, not 0";
  }
}

TEST(HostBackendTest, MemoryTheMachineCannotBackIsResourceExhaustedAtAllocation) {
  // A device larger than the machine: the segment fails when allocated (no
  // later access can fault), and the device's books are as before.
  std::unique_ptr<HostBackend> backend = MakeBackend(uint64_t{1} << 40);
  ASSERT_NE(backend, nullptr);
  EXPECT_THAT(backend->AllocateSegment(DeviceIndex(0), uint64_t{900} << 30),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       ::testing::AllOf(::testing::HasSubstr("host device 0: cannot allocate"),
                                        ::testing::HasSubstr("bytes of memory are available"))));
  EXPECT_THAT(backend->FreeMemory(DeviceIndex(0)), IsOkAndHolds(uint64_t{1} << 40));
  EXPECT_OK(backend->AllocateSegment(DeviceIndex(0), 2 * kMiB));
}

TEST(HostBackendTest, AnUnbackedBackendHandsOutAddressesWithoutMemory) {
  MemoryFileTable table;
  HostBackend::Options options = TestOptions(uint64_t{141} << 30);
  options.memory_files = &table;
  options.backed = false;
  absl::StatusOr<std::unique_ptr<HostBackend>> backend = HostBackend::Create(options);
  ASSERT_OK(backend);
  // 100 GiB at once: nothing behind it, so this is instant and takes no memory.
  absl::StatusOr<BackendSegment> huge =
      (*backend)->AllocateSegment(DeviceIndex(0), uint64_t{100} << 30);
  ASSERT_OK(huge);
  EXPECT_TRUE(huge->handle.data.empty());
  EXPECT_EQ(table.size(), 0u);
  EXPECT_THAT((*backend)->FreeMemory(DeviceIndex(0)), IsOkAndHolds(uint64_t{41} << 30));
  absl::StatusOr<BackendStream> stream = (*backend)->CreateStream(DeviceIndex(0), 0);
  ASSERT_OK(stream);
  EXPECT_THAT(
      (*backend)->Memset(*stream, huge->address, 1, 4096),
      StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::HasSubstr("no memory behind it")));
  EXPECT_OK((*backend)->ReleaseSegment(DeviceIndex(0), huge->address));
}

TEST(HostBackendTest, ReleaseAndDestructorRemoveSegmentsFromTheTable) {
  MemoryFileTable table;
  HostBackend::Options options = TestOptions();
  options.memory_files = &table;
  absl::StatusOr<std::unique_ptr<HostBackend>> created = HostBackend::Create(options);
  ASSERT_OK(created);
  std::unique_ptr<HostBackend> backend = *std::move(created);
  absl::StatusOr<BackendSegment> a = backend->AllocateSegment(DeviceIndex(0), 512);
  absl::StatusOr<BackendSegment> b = backend->AllocateSegment(DeviceIndex(1), 4096);
  absl::StatusOr<BackendSegment> released = backend->AllocateSegment(DeviceIndex(1), 4096);
  ASSERT_OK(a);
  ASSERT_OK(b);
  ASSERT_OK(released);
  ASSERT_OK(backend->ReleaseSegment(DeviceIndex(1), released->address));
  EXPECT_EQ(table.size(), 2u);
  EXPECT_OK(table.Find(a->handle.data, MemoryFileTable::kAnySession));
  EXPECT_THAT(table.Find(released->handle.data, MemoryFileTable::kAnySession),
              StatusIs(absl::StatusCode::kNotFound));
  backend.reset();
  EXPECT_EQ(table.size(), 0u);
}

}  // namespace
}  // namespace gpumux
