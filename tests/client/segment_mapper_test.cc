#include "client/segment_mapper.h"

#include "client/cuda_ipc_mapping.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/memory_socket.h"
#include "common/sealed_memory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/backend/memory_file_table.h"
#include "server/core/notice_sink.h"
#include "server/core/session_registry.h"
#include "server/rpc/memory_socket_server.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::StatusIs;
using ::testing::HasSubstr;

constexpr uint64_t kSize = 1 << 16;

class NoSink final : public NoticeSink {
 public:
  void SegmentReleased(DeviceIndex, SegmentId, uint64_t, uint64_t) override {}
  void AskReleaseCached(uint64_t, DeviceIndex) override {}
  void AskLeaseBlocks(uint64_t) override {}
  void StartProfiling(uint64_t, uint64_t) override {}
  void StopProfiling(uint64_t) override {}
  void Terminate(SessionEndReason, absl::string_view) override {}
};

// The daemon's side of the memory socket, alone: a registry with one open
// session, a table and the server on a temporary socket.
class MemorySocketFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/gpumux-mapper-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    absl::StatusOr<OpenedSession> opened =
        registry_.Open(SessionInfo{.client_name = "mapper"}, std::make_shared<NoSink>());
    ASSERT_OK(opened);
    absl::StatusOr<std::unique_ptr<MemorySocketServer>> server =
        MemorySocketServer::Start({.path = dir_ + "/gpumux.sock.memfd"}, &registry_, &table_);
    ASSERT_OK(server);
    server_ = *std::move(server);
    fetcher_ = std::make_unique<MemoryFileFetcher>(
        server_->path(), absl::StrCat(opened->info.id.value(), ":", opened->secret));
  }
  void TearDown() override {
    server_.reset();
    rmdir(dir_.c_str());
  }

  // A segment's memory file as the host backend makes one, filed in the table.
  v1::SegmentHandle Segment(uint64_t size = kSize) {
    absl::StatusOr<SealedMemory> memory = SealedMemory::Create("mapper-test", size);
    EXPECT_OK(memory);
    v1::SegmentHandle handle;
    handle.set_kind(v1::HANDLE_KIND_HOST_MEMFD);
    if (memory.ok())
      handle.set_data(table_.Add(std::make_shared<const SealedMemory>(*std::move(memory))));
    return handle;
  }

  std::string dir_;
  SessionRegistry registry_;
  MemoryFileTable table_;
  std::unique_ptr<MemorySocketServer> server_;
  std::unique_ptr<MemoryFileFetcher> fetcher_;
};

using SegmentMapperTest = MemorySocketFixture;

TEST_F(SegmentMapperTest, MapsEachSegmentOnce) {
  const v1::SegmentHandle handle = Segment();
  SegmentMapper mapper;
  absl::StatusOr<void*> first =
      mapper.Map(DeviceIndex(0), SegmentId(1), handle, kSize, fetcher_.get());
  ASSERT_OK(first);
  absl::StatusOr<void*> again =
      mapper.Map(DeviceIndex(0), SegmentId(1), handle, kSize, fetcher_.get());
  ASSERT_OK(again);
  EXPECT_EQ(*first, *again);
  EXPECT_EQ(mapper.size(), 1u);

  // Another (device, segment) key is another mapping, even of the same object.
  absl::StatusOr<void*> other =
      mapper.Map(DeviceIndex(1), SegmentId(1), handle, kSize, fetcher_.get());
  ASSERT_OK(other);
  EXPECT_NE(*first, *other);
  EXPECT_EQ(mapper.size(), 2u);

  // Both are views of the same memory.
  std::memcpy(*first, "abc", 3);
  EXPECT_EQ(std::memcmp(*other, "abc", 3), 0);
}

TEST_F(SegmentMapperTest, UnmapDropsTheMappingAndIgnoresUnknownSegments) {
  const v1::SegmentHandle handle = Segment();
  SegmentMapper mapper;
  ASSERT_OK(mapper.Map(DeviceIndex(0), SegmentId(1), handle, kSize, fetcher_.get()));
  mapper.Unmap(DeviceIndex(0), SegmentId(2));
  mapper.Unmap(DeviceIndex(1), SegmentId(1));
  EXPECT_EQ(mapper.size(), 1u);
  mapper.Unmap(DeviceIndex(0), SegmentId(1));
  EXPECT_EQ(mapper.size(), 0u);
  // Mapping again after a release works (the object still exists here).
  ASSERT_OK(mapper.Map(DeviceIndex(0), SegmentId(1), handle, kSize, fetcher_.get()));
  mapper.UnmapAll();
  EXPECT_EQ(mapper.size(), 0u);
}

TEST_F(SegmentMapperTest, AnUnknownKeyIsNotFoundAndAWrongSizeIsRefused) {
  SegmentMapper mapper;
  v1::SegmentHandle handle;
  handle.set_kind(v1::HANDLE_KIND_HOST_MEMFD);
  handle.set_data(std::string(32, 'e'));
  EXPECT_THAT(mapper.Map(DeviceIndex(0), SegmentId(4), handle, kSize, fetcher_.get()),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("cannot map segment 4 of device 0: no shared memory")));
  EXPECT_THAT(mapper.Map(DeviceIndex(0), SegmentId(4), Segment(), 2 * kSize, fetcher_.get()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not the 131072 expected")));
  EXPECT_THAT(mapper.Map(DeviceIndex(0), SegmentId(4), Segment(), kSize, nullptr),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("TCP")));
  EXPECT_EQ(mapper.size(), 0u);
}

TEST_F(SegmentMapperTest, BadHandlesAreInvalidArguments) {
  SegmentMapper mapper;
  v1::SegmentHandle unspecified;
  EXPECT_THAT(mapper.Map(DeviceIndex(0), SegmentId(1), unspecified, kSize, fetcher_.get()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown kind 0")));
  v1::SegmentHandle nameless;
  nameless.set_kind(v1::HANDLE_KIND_HOST_MEMFD);
  EXPECT_THAT(mapper.Map(DeviceIndex(0), SegmentId(1), nameless, kSize, fetcher_.get()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(mapper.Map(DeviceIndex(0), SegmentId(1), Segment(), 0, fetcher_.get()),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// Without a CUDA build, or without a visible device, a CUDA handle has no
// pointer here (UNIMPLEMENTED, which Client::Allocate tolerates); the GPU
// tests map real ones.
TEST_F(SegmentMapperTest, CudaHandlesNeedACudaBuildAndDevice) {
#ifdef GPUMUX_CLIENT_HAS_CUDA
  if (CudaDeviceVisible())
    GTEST_SKIP() << "a CUDA device is visible: the gpu tests map real handles";
  const char* expected = "no CUDA device is visible to this process";
#else
  const char* expected = "CUDA IPC mapping needs a CUDA-enabled client build";
#endif
  SegmentMapper mapper;
  v1::SegmentHandle handle;
  handle.set_kind(v1::HANDLE_KIND_CUDA_IPC);
  handle.set_data(std::string(64, '\0'));
  EXPECT_THAT(mapper.Map(DeviceIndex(0), SegmentId(1), handle, kSize, fetcher_.get()),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr(expected)));
  EXPECT_EQ(mapper.size(), 0u);
}

}  // namespace
}  // namespace gpumux
