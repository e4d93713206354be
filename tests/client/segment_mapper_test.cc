#include "client/segment_mapper.h"

#include "client/cuda_ipc_mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::StatusIs;
using ::testing::HasSubstr;

constexpr uint64_t kSize = 1 << 16;

// A shared-memory object as the host backend makes one, removed at the end.
class ShmObject {
 public:
  ShmObject() : name_(absl::StrCat("/gpumux-mapper-test-", getpid(), "-", counter_++)) {
    int fd = shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, kSize), 0);
    close(fd);
  }
  ~ShmObject() { shm_unlink(name_.c_str()); }
  v1::SegmentHandle handle() const {
    v1::SegmentHandle handle;
    handle.set_kind(v1::HANDLE_KIND_HOST_SHM);
    handle.set_data(name_);
    return handle;
  }
  const std::string& name() const { return name_; }

 private:
  static inline int counter_ = 0;
  std::string name_;
};

TEST(SegmentMapperTest, MapsEachSegmentOnce) {
  ShmObject object;
  SegmentMapper mapper;
  absl::StatusOr<void*> first = mapper.Map(DeviceIndex(0), SegmentId(1), object.handle(), kSize);
  ASSERT_OK(first);
  absl::StatusOr<void*> again = mapper.Map(DeviceIndex(0), SegmentId(1), object.handle(), kSize);
  ASSERT_OK(again);
  EXPECT_EQ(*first, *again);
  EXPECT_EQ(mapper.size(), 1u);

  // Another (device, segment) key is another mapping, even of the same object.
  absl::StatusOr<void*> other = mapper.Map(DeviceIndex(1), SegmentId(1), object.handle(), kSize);
  ASSERT_OK(other);
  EXPECT_NE(*first, *other);
  EXPECT_EQ(mapper.size(), 2u);

  // Both are views of the same memory.
  std::memcpy(*first, "abc", 3);
  EXPECT_EQ(std::memcmp(*other, "abc", 3), 0);
}

TEST(SegmentMapperTest, UnmapDropsTheMappingAndIgnoresUnknownSegments) {
  ShmObject object;
  SegmentMapper mapper;
  ASSERT_OK(mapper.Map(DeviceIndex(0), SegmentId(1), object.handle(), kSize));
  mapper.Unmap(DeviceIndex(0), SegmentId(2));
  mapper.Unmap(DeviceIndex(1), SegmentId(1));
  EXPECT_EQ(mapper.size(), 1u);
  mapper.Unmap(DeviceIndex(0), SegmentId(1));
  EXPECT_EQ(mapper.size(), 0u);
  // Mapping again after a release works (the object still exists here).
  ASSERT_OK(mapper.Map(DeviceIndex(0), SegmentId(1), object.handle(), kSize));
  mapper.UnmapAll();
  EXPECT_EQ(mapper.size(), 0u);
}

TEST(SegmentMapperTest, MissingObjectIsNotFound) {
  SegmentMapper mapper;
  v1::SegmentHandle handle;
  handle.set_kind(v1::HANDLE_KIND_HOST_SHM);
  handle.set_data("/gpumux-mapper-test-does-not-exist");
  EXPECT_THAT(mapper.Map(DeviceIndex(0), SegmentId(4), handle, kSize),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("cannot map segment 4 of device 0: "
                                 "shm_open(/gpumux-mapper-test-does-not-exist)")));
  EXPECT_EQ(mapper.size(), 0u);
}

TEST(SegmentMapperTest, BadHandlesAreInvalidArguments) {
  SegmentMapper mapper;
  v1::SegmentHandle unspecified;
  EXPECT_THAT(mapper.Map(DeviceIndex(0), SegmentId(1), unspecified, kSize),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown kind 0")));
  v1::SegmentHandle nameless;
  nameless.set_kind(v1::HANDLE_KIND_HOST_SHM);
  EXPECT_THAT(mapper.Map(DeviceIndex(0), SegmentId(1), nameless, kSize),
              StatusIs(absl::StatusCode::kInvalidArgument));
  ShmObject object;
  EXPECT_THAT(mapper.Map(DeviceIndex(0), SegmentId(1), object.handle(), 0),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// Without a CUDA build, or without a visible device, a CUDA handle has no
// pointer here (UNIMPLEMENTED, which Client::Allocate tolerates); the GPU
// tests map real ones.
TEST(SegmentMapperTest, CudaHandlesNeedACudaBuildAndDevice) {
#ifdef GPUMUX_CLIENT_HAS_CUDA
  if (CudaDeviceVisible()) GTEST_SKIP() << "a CUDA device is visible: the gpu tests map real handles";
  const char* expected = "no CUDA device is visible to this process";
#else
  const char* expected = "CUDA IPC mapping needs a CUDA-enabled client build";
#endif
  SegmentMapper mapper;
  v1::SegmentHandle handle;
  handle.set_kind(v1::HANDLE_KIND_CUDA_IPC);
  handle.set_data(std::string(64, '\0'));
  EXPECT_THAT(mapper.Map(DeviceIndex(0), SegmentId(1), handle, kSize),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr(expected)));
  EXPECT_EQ(mapper.size(), 0u);
}

}  // namespace
}  // namespace gpumux
