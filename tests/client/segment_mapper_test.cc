#include "client/segment_mapper.h"

#include "client/cuda_ipc_mapping.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/ipc/memory_socket.h"
#include "gmock/gmock.h"
#include "gpumux/common/sealed_memory.h"
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
        registry_.Open(SessionRecord{.client_name = "mapper"}, std::make_shared<NoSink>());
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

// The permissions /proc/self/maps shows for the mapping holding `address`
// ("rw-s"), or "" when none does.
std::string Protection(const void* address) {
  std::ifstream maps("/proc/self/maps");
  const auto at = reinterpret_cast<uintptr_t>(address);
  for (std::string line; std::getline(maps, line);) {
    uintptr_t start = 0;
    uintptr_t end = 0;
    char perms[8] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %7s", &start, &end, perms) == 3 && start <= at &&
        at < end) {
      return perms;
    }
  }
  return "";
}

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
// pointer here (UNIMPLEMENTED, which memory::Allocate tolerates); the GPU
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

// An expandable segment of the CUDA backend likewise (its pages are device
// memory the driver exported).
TEST_F(SegmentMapperTest, CudaPagesNeedACudaBuildAndDevice) {
#ifdef GPUMUX_CLIENT_HAS_CUDA
  if (CudaDeviceVisible()) GTEST_SKIP() << "a CUDA device is visible: the gpu tests map real pages";
  const char* expected = "no CUDA device is visible to this process";
#else
  const char* expected = "mapping CUDA pages needs a CUDA-enabled client build";
#endif
  SegmentMapper mapper;
  v1::SegmentHandle handle;
  handle.set_kind(v1::HANDLE_KIND_CUDA_PAGES);
  EXPECT_THAT(mapper.Map(DeviceIndex(0), SegmentId(1), handle, 64 << 20, fetcher_.get()),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr(expected)));
  EXPECT_THAT(mapper.Map(DeviceIndex(0), SegmentId(1), handle, 64 << 20, nullptr),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("TCP")));
  EXPECT_EQ(mapper.size(), 0u);
}

// Memory filed as exportable (a CUDA page's: here memfds stand in for the
// driver's descriptors) reaches a session through the memory socket as a
// descriptor made for each fetch; Fetch, which wants a sealed memory file,
// refuses it, and an export that fails answers with its status.
TEST_F(SegmentMapperTest, ExportableMemoryArrivesAsADescriptorPerFetch) {
  class MemfdExports final : public ExportableMemory {
   public:
    uint64_t size() const override { return kSize; }
    absl::StatusOr<UniqueFd> Export() const override {
      if (fail) return absl::ResourceExhaustedError("the driver has no descriptors left");
      UniqueFd fd(memfd_create("exported", MFD_CLOEXEC));
      if (!fd.valid() || ftruncate(fd.get(), kSize) != 0) return absl::InternalError("memfd");
      return fd;
    }
    bool fail = false;
  };
  auto exported = std::make_shared<MemfdExports>();
  const std::string key = table_.Add(exported);
  absl::StatusOr<UniqueFd> first = fetcher_->FetchDescriptor(key, kSize);
  absl::StatusOr<UniqueFd> second = fetcher_->FetchDescriptor(key, kSize);
  ASSERT_OK(first);
  ASSERT_OK(second);
  struct stat a {
  }, b{};
  ASSERT_EQ(fstat(first->get(), &a), 0);
  ASSERT_EQ(fstat(second->get(), &b), 0);
  EXPECT_NE(a.st_ino, b.st_ino) << "one descriptor made per fetch";
  EXPECT_EQ(a.st_size, static_cast<off_t>(kSize));
  EXPECT_THAT(fetcher_->Fetch(key, kSize), StatusIs(absl::StatusCode::kInvalidArgument));
  exported->fail = true;
  EXPECT_THAT(fetcher_->FetchDescriptor(key, kSize),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("no descriptors left")));
  table_.Remove(key);
  EXPECT_THAT(fetcher_->FetchDescriptor(key, kSize), StatusIs(absl::StatusCode::kNotFound));
}

// A host-backend expandable segment: pages map at their offsets; a page the
// daemon replaced before its unmap notice arrived survives that notice, and
// the next notice unmaps it.
TEST_F(SegmentMapperTest, ALateUnmapNoticeSparesThePageThatReplacedItsPage) {
  constexpr uint64_t kPage = uint64_t{2} << 20;
  auto page_file = [&](char fill) {
    absl::StatusOr<SealedMemory> memory = SealedMemory::Create("mapper-page", kPage);
    EXPECT_OK(memory);
    MemoryMapping view = *memory->Map();
    std::memset(view.data(), fill, kPage);
    return table_.Add(std::make_shared<const SealedMemory>(*std::move(memory)));
  };
  auto pages = [](std::initializer_list<std::pair<uint64_t, std::string>> list) {
    SegmentMapper::PageHandles handles;
    for (const auto& [offset, key] : list) {
      v1::PageHandle* page = handles.Add();
      page->set_offset(offset);
      page->set_size(kPage);
      page->set_key(key);
    }
    return handles;
  };
  v1::SegmentHandle handle;
  handle.set_kind(v1::HANDLE_KIND_HOST_PAGES);
  SegmentMapper mapper;
  const SegmentMapper::PageHandles first = pages({{0, page_file('a')}, {kPage, page_file('b')}});
  absl::StatusOr<void*> base =
      mapper.Map(DeviceIndex(0), SegmentId(7), handle, 4 * kPage, fetcher_.get(), nullptr, &first);
  ASSERT_OK(base);
  auto* bytes = static_cast<char*>(*base);
  EXPECT_EQ(bytes[0], 'a');
  EXPECT_EQ(bytes[kPage], 'b');
  // The daemon unmapped page 1 and mapped "c" there; the reply comes first.
  const SegmentMapper::PageHandles second = pages({{kPage, page_file('c')}});
  ASSERT_OK(mapper.Map(DeviceIndex(0), SegmentId(7), handle, 4 * kPage, fetcher_.get(), nullptr,
                       &second));
  EXPECT_EQ(bytes[kPage], 'c');
  mapper.UnmapPages(DeviceIndex(0), SegmentId(7), kPage, kPage);  // the late notice about "b"
  EXPECT_EQ(bytes[kPage], 'c');
  bytes[kPage] = 'C';
  EXPECT_EQ(bytes[kPage], 'C');
  EXPECT_EQ(Protection(bytes + kPage), "rw-s");
  mapper.UnmapPages(DeviceIndex(0), SegmentId(7), 0, 2 * kPage);  // about "a" and "c"
  EXPECT_EQ(Protection(bytes), "---p");
  EXPECT_EQ(Protection(bytes + kPage), "---p");
}

}  // namespace
}  // namespace gpumux
