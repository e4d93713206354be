#include "server/backend/host/host_backend.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/status_macros.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "tests/backend/device_backend_conformance.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kBase = 0x7f0000000000;
constexpr uint64_t kDeviceSpan = uint64_t{1} << 42;

// The segment's shared-memory object mapped into the test process.
class HostSegmentView final : public testing::SegmentView {
 public:
  static absl::StatusOr<std::unique_ptr<testing::SegmentView>> Map(const BackendSegment& segment) {
    int fd = shm_open(segment.handle.data.c_str(), O_RDWR, 0);
    if (fd < 0) return absl::ErrnoToStatus(errno, "shm_open");
    void* mapped = mmap(nullptr, segment.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
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
  options.shm_prefix = "/gpumuxtest";
  return options;
}

std::unique_ptr<HostBackend> MakeBackend(uint64_t device_memory = 256 * kMiB) {
  absl::StatusOr<std::unique_ptr<HostBackend>> backend = HostBackend::Create(TestOptions(device_memory));
  EXPECT_OK(backend);
  return backend.ok() ? *std::move(backend) : nullptr;
}

struct HostBackendFactory {
  static absl::StatusOr<std::unique_ptr<DeviceBackend>> Create() {
    GPUMUX_ASSIGN_OR_RETURN(std::unique_ptr<HostBackend> backend,
                            HostBackend::Create(TestOptions()));
    return std::unique_ptr<DeviceBackend>(std::move(backend));
  }
  static absl::StatusOr<std::unique_ptr<testing::SegmentView>> View(const BackendSegment& segment) {
    return HostSegmentView::Map(segment);
  }
};

bool ShmExists(const std::string& name) {
  int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) return false;
  close(fd);
  return true;
}

}  // namespace

namespace testing {
INSTANTIATE_TYPED_TEST_SUITE_P(Host, DeviceBackendConformanceTest,
                               ::testing::Types<HostBackendFactory>);
}  // namespace testing

namespace {

TEST(HostBackendTest, RemovesObjectsLeftByDeadDaemonsAtStart) {
  // A pid that existed and is gone: a reaped child's.
  pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  int status = 0;
  waitpid(child, &status, 0);
  const std::string stale = absl::StrCat("/gpumuxstale-", child, "-00000000-d0-0-0000000000000000");
  const std::string alive = absl::StrCat("/gpumuxstale-", getpid(), "-00000000-d0-0-0000000000000000");
  for (const std::string& name : {stale, alive}) {
    int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    close(fd);
  }
  HostBackend::Options options;
  options.device_count = 1;
  options.device_memory = 4 << 20;
  options.shm_prefix = "/gpumuxstale";
  ASSERT_OK(HostBackend::Create(options));
  EXPECT_LT(shm_open(stale.c_str(), O_RDWR, 0), 0) << "the dead daemon's object was not removed";
  int fd = shm_open(alive.c_str(), O_RDWR, 0);
  EXPECT_GE(fd, 0) << "a live process's object was removed";
  if (fd >= 0) close(fd);
  shm_unlink(alive.c_str());
}

TEST(HostBackendTest, RejectsBadOptions) {
  HostBackend::Options options = TestOptions();
  options.device_count = 0;
  EXPECT_THAT(HostBackend::Create(options), StatusIs(absl::StatusCode::kInvalidArgument));
  options = TestOptions(2 * kMiB - 512);
  EXPECT_THAT(HostBackend::Create(options), StatusIs(absl::StatusCode::kInvalidArgument));
  for (const char* prefix : {"", "/", "gpumux", "/gpu/mux"}) {
    options = TestOptions();
    options.shm_prefix = prefix;
    EXPECT_THAT(HostBackend::Create(options), StatusIs(absl::StatusCode::kInvalidArgument))
        << "prefix '" << prefix << "'";
  }
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
  EXPECT_EQ(backend->FreeMemory(DeviceIndex(1)), 256 * kMiB);
}

TEST(HostBackendTest, NamesAreUnguessableAndModeIs0660) {
  std::unique_ptr<HostBackend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  absl::StatusOr<BackendSegment> first = backend->AllocateSegment(DeviceIndex(1), 512);
  ASSERT_OK(first);
  absl::StatusOr<BackendSegment> second = backend->AllocateSegment(DeviceIndex(1), 512);
  ASSERT_OK(second);
  EXPECT_EQ(first->handle.kind, SegmentHandle::Kind::kHostShm);
  const std::string pid = absl::StrCat(getpid());
  EXPECT_THAT(first->handle.data,
              MatchesRegex("/gpumuxtest-" + pid + "-[0-9a-f]{8}-d1-0-[0-9a-f]{16}"));
  EXPECT_THAT(second->handle.data,
              MatchesRegex("/gpumuxtest-" + pid + "-[0-9a-f]{8}-d1-1-[0-9a-f]{16}"));
  // Same per-process stem, different random suffixes.
  const std::string& x = first->handle.data;
  const std::string& y = second->handle.data;
  EXPECT_EQ(x.substr(0, x.find("-d1-")), y.substr(0, y.find("-d1-")));
  EXPECT_NE(x.substr(x.size() - 16), y.substr(y.size() - 16));

  int fd = shm_open(first->handle.data.c_str(), O_RDONLY, 0);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  struct stat st;
  ASSERT_EQ(fstat(fd, &st), 0);
  close(fd);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), 512u);
}

TEST(HostBackendTest, EnforcesDeviceMemoryExactly) {
  std::unique_ptr<HostBackend> backend = MakeBackend(64 * kMiB);
  ASSERT_NE(backend, nullptr);
  absl::StatusOr<BackendSegment> big = backend->AllocateSegment(DeviceIndex(0), 64 * kMiB - 512);
  ASSERT_OK(big);
  EXPECT_EQ(backend->FreeMemory(DeviceIndex(0)), 512u);
  absl::StatusOr<BackendSegment> last = backend->AllocateSegment(DeviceIndex(0), 512);
  ASSERT_OK(last);
  EXPECT_EQ(backend->FreeMemory(DeviceIndex(0)), 0u);
  EXPECT_THAT(backend->AllocateSegment(DeviceIndex(0), 1024),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       "host device 0: cannot allocate 1024 bytes: 0 of 67108864 bytes free"));
  // The other device is untouched.
  EXPECT_OK(backend->AllocateSegment(DeviceIndex(1), 64 * kMiB));
  ASSERT_OK(backend->ReleaseSegment(DeviceIndex(0), last->address));
  EXPECT_THAT(backend->AllocateSegment(DeviceIndex(0), 1024),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("512 of 67108864 bytes free")));
}

TEST(HostBackendTest, SmallSegmentsDoNotUseUpTheLimitThroughAlignment) {
  // 200 segments of 512 bytes take 400 MiB of emulated addresses but only
  // 100 KiB of the 64 MiB limit.
  std::unique_ptr<HostBackend> backend = MakeBackend(64 * kMiB);
  ASSERT_NE(backend, nullptr);
  for (int i = 0; i < 200; ++i) {
    ASSERT_OK(backend->AllocateSegment(DeviceIndex(0), 512)) << i;
  }
  EXPECT_EQ(backend->FreeMemory(DeviceIndex(0)), 64 * kMiB - 200 * 512);
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
  }
}

TEST(HostBackendTest, DestructorUnlinksHeldSegments) {
  std::unique_ptr<HostBackend> backend = MakeBackend();
  ASSERT_NE(backend, nullptr);
  absl::StatusOr<BackendSegment> a = backend->AllocateSegment(DeviceIndex(0), 512);
  absl::StatusOr<BackendSegment> b = backend->AllocateSegment(DeviceIndex(1), 4096);
  absl::StatusOr<BackendSegment> released = backend->AllocateSegment(DeviceIndex(1), 4096);
  ASSERT_OK(a);
  ASSERT_OK(b);
  ASSERT_OK(released);
  ASSERT_OK(backend->ReleaseSegment(DeviceIndex(1), released->address));
  EXPECT_TRUE(ShmExists(a->handle.data));
  EXPECT_TRUE(ShmExists(b->handle.data));
  backend.reset();
  EXPECT_FALSE(ShmExists(a->handle.data));
  EXPECT_FALSE(ShmExists(b->handle.data));
}

TEST(HostBackendTest, WarnsWhenDevicesExceedDevShm) {
  std::ostringstream log;
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::ostream_sink_st>(log)));
  // 1024 devices of 4 TiB: 4 PiB, more than any /dev/shm.
  HostBackend::Options options = TestOptions(uint64_t{4} << 40);
  options.device_count = 1024;
  absl::StatusOr<std::unique_ptr<HostBackend>> huge = HostBackend::Create(options);
  const std::string huge_log = log.str();
  log.str("");
  absl::StatusOr<std::unique_ptr<HostBackend>> small = HostBackend::Create(TestOptions(2 * kMiB));
  const std::string small_log = log.str();
  spdlog::set_default_logger(previous);

  EXPECT_OK(huge);
  EXPECT_THAT(huge_log, HasSubstr("/dev/shm"));
  EXPECT_THAT(huge_log, HasSubstr("SIGBUS"));
  EXPECT_OK(small);
  EXPECT_EQ(small_log, "");
}

}  // namespace
}  // namespace gpumux
