// Copy service end to end over a real Unix socket (host backend): the staging
// buffer mapped by name as a client maps it, inline copies, device-to-device
// copies, memset, range checks, completion events, and the frees that must
// wait for queued work (record_stream, Memory.Free's wait_event_handles).

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gpumux/common/host_ipc_event.h"
#include "gtest/gtest.h"
#include "tests/rpc/daemon_fixture.h"
#include "tests/rpc/grpc_status_matchers.h"
#include "tests/rpc/ipc_gate.h"
#include "tests/rpc/stream_calls.h"
#include "tests/status_matchers.h"
#include "tests/support/test_pattern.h"

namespace gpumux::testing {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

std::string Pattern(size_t size, uint64_t seed) {
  std::string bytes(size, '\0');
  FillPattern(bytes.data(), size, seed);
  return bytes;
}

v1::CopyOptions On(uint64_t stream, bool wait = false, bool completion_event = false) {
  v1::CopyOptions options;
  options.set_stream(stream);
  options.set_wait(wait);
  options.set_completion_event(completion_event);
  return options;
}

v1::DeviceRange At(uint64_t allocation, uint64_t offset) {
  v1::DeviceRange range;
  range.set_allocation_id(allocation);
  range.set_offset(offset);
  return range;
}

grpc::Status Upload(RawSession& session, uint64_t allocation, uint64_t offset,
                    const std::string& bytes, const v1::CopyOptions& options = On(0, /*wait=*/true),
                    v1::CopyResponse* out = nullptr) {
  v1::HostToDeviceRequest request;
  *request.mutable_dst() = At(allocation, offset);
  request.set_data(bytes);
  *request.mutable_options() = options;
  v1::CopyResponse response;
  grpc::Status status = session.copy().HostToDevice(session.Context().get(), request, &response);
  if (out != nullptr) *out = response;
  return status;
}

// Inline reads in pieces of at most 1 MiB (gRPC's default 4 MiB receive
// limit on the test's channel).
grpc::Status Download(RawSession& session, uint64_t allocation, uint64_t offset, uint64_t size,
                      std::string* out, uint64_t stream = 0) {
  out->clear();
  uint64_t done = 0;
  do {
    v1::DeviceToHostRequest request;
    *request.mutable_src() = At(allocation, offset + done);
    request.set_inline_size(std::min(size - done, kMiB));
    *request.mutable_options() = On(stream);
    v1::DeviceToHostResponse response;
    grpc::Status status = session.copy().DeviceToHost(session.Context().get(), request, &response);
    if (!status.ok()) return status;
    EXPECT_EQ(response.data().size(), request.inline_size());
    out->append(response.data());
    done += request.inline_size();
  } while (done < size);
  return grpc::Status::OK;
}

grpc::Status Memset(RawSession& session, uint64_t allocation, uint64_t offset, uint64_t size,
                    uint32_t value, const v1::CopyOptions& options = On(0),
                    v1::CopyResponse* out = nullptr) {
  v1::MemsetRequest request;
  *request.mutable_dst() = At(allocation, offset);
  request.set_size(size);
  request.set_value(value);
  *request.mutable_options() = options;
  v1::CopyResponse response;
  grpc::Status status = session.copy().Memset(session.Context().get(), request, &response);
  if (out != nullptr) *out = response;
  return status;
}

grpc::Status CopyDeviceToDevice(RawSession& session, const v1::DeviceRange& dst,
                                const v1::DeviceRange& src, uint64_t size,
                                const v1::CopyOptions& options = On(0)) {
  v1::DeviceToDeviceRequest request;
  *request.mutable_dst() = dst;
  *request.mutable_src() = src;
  request.set_size(size);
  *request.mutable_options() = options;
  v1::CopyResponse response;
  return session.copy().DeviceToDevice(session.Context().get(), request, &response);
}

grpc::Status GetStagingBuffer(RawSession& session, uint64_t min_size, v1::StagingBuffer* out) {
  v1::GetStagingBufferRequest request;
  request.set_min_size(min_size);
  v1::StagingBuffer response;
  grpc::Status status =
      session.copy().GetStagingBuffer(session.Context().get(), request, &response);
  if (out != nullptr) *out = response;
  return status;
}

v1::StagingRange Staging(uint64_t offset, uint64_t size) {
  v1::StagingRange range;
  range.set_offset(offset);
  range.set_size(size);
  return range;
}

// The staging buffer mapped as the client library maps it: its memory file
// fetched from the memory socket.
class MappedStaging {
 public:
  // Fetched for `session` from the memory socket next to `socket_path`.
  MappedStaging(const RawSession& session, const std::string& socket_path,
                const v1::StagingBuffer& buffer)
      : size_(buffer.size()) {
    EXPECT_EQ(buffer.handle().kind(), v1::HANDLE_KIND_HOST_MEMFD);
    absl::StatusOr<SealedMemory> memory =
        FetchMemory(session, socket_path, buffer.handle().data(), size_);
    if (!memory.ok()) {
      ADD_FAILURE() << "fetch " << buffer.handle().data() << ": " << memory.status();
      return;
    }
    void* data = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, memory->fd(), 0);
    if (data == MAP_FAILED) {
      ADD_FAILURE() << "mmap: " << std::strerror(errno);
      return;
    }
    data_ = static_cast<char*>(data);
  }
  ~MappedStaging() {
    if (data_ != nullptr) munmap(data_, size_);
  }
  MappedStaging(const MappedStaging&) = delete;
  MappedStaging& operator=(const MappedStaging&) = delete;

  char* data() const { return data_; }
  std::string Read(uint64_t offset, uint64_t size) const {
    return std::string(data_ + offset, size);
  }

 private:
  uint64_t size_;
  char* data_ = nullptr;
};

v1::MemorySnapshot Snapshot(RawSession& session, int device) {
  v1::GetSnapshotRequest request;
  request.set_device(device);
  v1::MemorySnapshot snapshot;
  EXPECT_THAT(session.memory().GetSnapshot(session.Context().get(), request, &snapshot),
              GrpcIsOk());
  return snapshot;
}

// The state of the snapshot block at `address`, or "" when none starts there.
std::string BlockState(RawSession& session, int device, uint64_t address) {
  const v1::MemorySnapshot snapshot = Snapshot(session, device);
  for (const v1::SnapshotSegment& segment : snapshot.segments()) {
    for (const v1::SnapshotBlock& block : segment.blocks()) {
      if (block.address() == address) return block.state();
    }
  }
  return "";
}

using CopyServiceTest = DaemonTest;

TEST_F(CopyServiceTest, StagingBufferSizesRoundUpToTwoMiB) {
  RawSession session(channel_, "staging-sizes");
  v1::StagingBuffer first;
  ASSERT_THAT(GetStagingBuffer(session, 0, &first), GrpcIsOk());
  EXPECT_EQ(first.size(), 2 * kMiB);
  EXPECT_EQ(first.handle().kind(), v1::HANDLE_KIND_HOST_MEMFD);
  EXPECT_TRUE(first.pinned());
  EXPECT_OK(FetchMemory(session, socket_path(), first.handle().data(), first.size()));
  // The staging buffer is this session's alone.
  RawSession other(channel_, "other");
  EXPECT_THAT(
      FetchMemory(other, socket_path(), first.handle().data(), first.size()),
      StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("belongs to another session")));

  v1::StagingBuffer same;
  ASSERT_THAT(GetStagingBuffer(session, kMiB, &same), GrpcIsOk());
  EXPECT_EQ(same.handle().data(), first.handle().data());

  v1::StagingBuffer larger;
  ASSERT_THAT(GetStagingBuffer(session, 3 * kMiB + 1, &larger), GrpcIsOk());
  EXPECT_EQ(larger.size(), 4 * kMiB);
  EXPECT_NE(larger.handle().data(), first.handle().data());
  EXPECT_THAT(FetchMemory(session, socket_path(), first.handle().data(), first.size()),
              StatusIs(absl::StatusCode::kNotFound))
      << "the replaced buffer can still be fetched";

  v1::StagingBuffer current;
  ASSERT_THAT(GetStagingBuffer(session, 0, &current), GrpcIsOk());
  EXPECT_EQ(current.handle().data(), larger.handle().data());
  EXPECT_EQ(current.size(), 4 * kMiB);

  EXPECT_THAT(GetStagingBuffer(session, (uint64_t{4} << 30) + 1, nullptr), GrpcStatusIs(kInvalid));
}

TEST_F(CopyServiceTest, StagingBufferCarriesBytesBothWays) {
  RawSession session(channel_, "staging");
  v1::StagingBuffer buffer;
  ASSERT_THAT(GetStagingBuffer(session, 0, &buffer), GrpcIsOk());
  MappedStaging staging(session, socket_path(), buffer);
  ASSERT_NE(staging.data(), nullptr);
  v1::Allocation a;
  ASSERT_THAT(session.Allocate(0, 3 * kMiB, &a), GrpcIsOk());

  const uint64_t size = kMiB + 3;
  const std::string bytes = Pattern(size, 11);
  std::memcpy(staging.data() + 4097, bytes.data(), size);
  v1::HostToDeviceRequest up;
  *up.mutable_dst() = At(a.allocation_id(), 5);
  *up.mutable_staging() = Staging(4097, size);
  *up.mutable_options() = On(0, /*wait=*/true);
  v1::CopyResponse uploaded;
  ASSERT_THAT(session.copy().HostToDevice(session.Context().get(), up, &uploaded), GrpcIsOk());
  EXPECT_EQ(uploaded.event(), 0u) << "no completion event unless asked for";
  std::string inline_read;
  ASSERT_THAT(Download(session, a.allocation_id(), 5, size, &inline_read), GrpcIsOk());
  EXPECT_EQ(inline_read, bytes);

  v1::DeviceToHostRequest down;
  *down.mutable_src() = At(a.allocation_id(), 5);
  *down.mutable_staging() = Staging(buffer.size() - size, size);
  *down.mutable_options() = On(0, /*wait=*/true);
  v1::DeviceToHostResponse downloaded;
  ASSERT_THAT(session.copy().DeviceToHost(session.Context().get(), down, &downloaded), GrpcIsOk());
  EXPECT_TRUE(downloaded.data().empty());
  EXPECT_EQ(staging.Read(buffer.size() - size, size), bytes);
}

TEST_F(CopyServiceTest, CopiesQueuedOnAReplacedStagingBufferStillLand) {
  RawSession session(channel_, "staging-replaced");
  v1::StagingBuffer old_buffer;
  ASSERT_THAT(GetStagingBuffer(session, 0, &old_buffer), GrpcIsOk());
  MappedStaging old_mapping(session, socket_path(),
                            old_buffer);  // the client keeps its mapping until it remaps
  ASSERT_NE(old_mapping.data(), nullptr);
  v1::Allocation a;
  ASSERT_THAT(session.Allocate(0, 4096, &a), GrpcIsOk());
  const std::string bytes = Pattern(4096, 17);
  ASSERT_THAT(Upload(session, a.allocation_id(), 0, bytes), GrpcIsOk());

  const uint64_t stream = NewStream(session, 0);
  IpcGate gate(session, socket_path());
  gate.Block(session, 0, stream);
  v1::DeviceToHostRequest down;
  *down.mutable_src() = At(a.allocation_id(), 0);
  *down.mutable_staging() = Staging(100, 4096);
  *down.mutable_options() = On(stream);
  v1::DeviceToHostResponse queued;
  ASSERT_THAT(session.copy().DeviceToHost(session.Context().get(), down, &queued), GrpcIsOk());
  v1::StagingBuffer new_buffer;
  ASSERT_THAT(GetStagingBuffer(session, 5 * kMiB, &new_buffer), GrpcIsOk());
  ASSERT_NE(new_buffer.handle().data(), old_buffer.handle().data());

  gate.Release();
  ASSERT_THAT(SynchronizeStream(session, 0, stream), GrpcIsOk());
  EXPECT_EQ(old_mapping.Read(100, 4096), bytes);
}

TEST_F(CopyServiceTest, StagingNeedsABufferAndRangesInsideIt) {
  RawSession session(channel_, "staging-errors");
  v1::Allocation a;
  ASSERT_THAT(session.Allocate(0, 4096, &a), GrpcIsOk());
  auto upload = [&](uint64_t offset, uint64_t size) {
    v1::HostToDeviceRequest request;
    *request.mutable_dst() = At(a.allocation_id(), 0);
    *request.mutable_staging() = Staging(offset, size);
    v1::CopyResponse response;
    return session.copy().HostToDevice(session.Context().get(), request, &response);
  };
  auto download = [&](uint64_t offset, uint64_t size) {
    v1::DeviceToHostRequest request;
    *request.mutable_src() = At(a.allocation_id(), 0);
    *request.mutable_staging() = Staging(offset, size);
    v1::DeviceToHostResponse response;
    return session.copy().DeviceToHost(session.Context().get(), request, &response);
  };
  EXPECT_THAT(upload(0, 16), GrpcStatusIs(kPrecondition, HasSubstr("GetStagingBuffer")));
  EXPECT_THAT(download(0, 16), GrpcStatusIs(kPrecondition, HasSubstr("GetStagingBuffer")));
  ASSERT_THAT(GetStagingBuffer(session, 0, nullptr), GrpcIsOk());
  EXPECT_THAT(upload(2 * kMiB - 10, 11), GrpcStatusIs(kOutOfRange));
  EXPECT_THAT(download(2 * kMiB + 1, 0), GrpcStatusIs(kOutOfRange));
  EXPECT_THAT(upload(kMax - 4, 16), GrpcStatusIs(kOutOfRange));
  EXPECT_THAT(upload(2 * kMiB - 16, 16), GrpcIsOk());
}

TEST_F(CopyServiceTest, InlineCopiesAtUnalignedOffsetsLeaveNeighboursAlone) {
  RawSession session(channel_, "inline");
  v1::Allocation a;
  ASSERT_THAT(session.Allocate(1, 8000, &a), GrpcIsOk());
  ASSERT_THAT(Memset(session, a.allocation_id(), 0, 8000, 0xAB), GrpcIsOk());
  const std::string bytes = Pattern(1001, 7);
  ASSERT_THAT(Upload(session, a.allocation_id(), 3, bytes, On(0)), GrpcIsOk());  // not waiting
  std::string all;
  ASSERT_THAT(Download(session, a.allocation_id(), 0, 8000, &all), GrpcIsOk());
  EXPECT_EQ(all.substr(0, 3), std::string(3, '\xAB'));
  EXPECT_EQ(all.substr(3, 1001), bytes);
  EXPECT_EQ(all.substr(1004), std::string(8000 - 1004, '\xAB'));

  std::string part;
  ASSERT_THAT(Download(session, a.allocation_id(), 501, 77, &part), GrpcIsOk());
  EXPECT_EQ(part, bytes.substr(498, 77));
}

TEST_F(CopyServiceTest, DeviceToDeviceWithinAndAcrossDevices) {
  RawSession session(channel_, "d2d");
  v1::Allocation src, same, other;
  ASSERT_THAT(session.Allocate(0, 3 * kMiB, &src), GrpcIsOk());
  ASSERT_THAT(session.Allocate(0, 3 * kMiB, &same), GrpcIsOk());
  ASSERT_THAT(session.Allocate(1, 3 * kMiB, &other), GrpcIsOk());
  const std::string bytes = Pattern(2 * kMiB + 5, 3);
  ASSERT_THAT(Upload(session, src.allocation_id(), 7, bytes), GrpcIsOk());

  ASSERT_THAT(CopyDeviceToDevice(session, At(same.allocation_id(), 1), At(src.allocation_id(), 7),
                                 bytes.size()),
              GrpcIsOk());
  ASSERT_THAT(CopyDeviceToDevice(session, At(other.allocation_id(), 9), At(src.allocation_id(), 7),
                                 bytes.size()),
              GrpcIsOk());
  std::string read;
  ASSERT_THAT(Download(session, same.allocation_id(), 1, bytes.size(), &read), GrpcIsOk());
  EXPECT_EQ(read, bytes);
  ASSERT_THAT(Download(session, other.allocation_id(), 9, bytes.size(), &read), GrpcIsOk());
  EXPECT_EQ(read, bytes);
  // Overlapping ranges of one allocation move as memmove does.
  ASSERT_THAT(
      CopyDeviceToDevice(session, At(same.allocation_id(), 2), At(same.allocation_id(), 1), 1000),
      GrpcIsOk());
  ASSERT_THAT(Download(session, same.allocation_id(), 2, 1000, &read), GrpcIsOk());
  EXPECT_EQ(read, bytes.substr(0, 1000));
  // Back from device 1 to device 0.
  ASSERT_THAT(
      CopyDeviceToDevice(session, At(src.allocation_id(), 0), At(other.allocation_id(), 9), 100),
      GrpcIsOk());
  ASSERT_THAT(Download(session, src.allocation_id(), 0, 100, &read), GrpcIsOk());
  EXPECT_EQ(read, bytes.substr(0, 100));
}

TEST_F(CopyServiceTest, CrossDeviceCopyWaitsForWorkQueuedOnTheSourceDevice) {
  // PyTorch's cross-device copy_ waits for the source device's current
  // stream: `x.to(1)` right after filling x on device 0 copies the fill.
  RawSession session(channel_, "cross-order");
  v1::Allocation src, dst;
  ASSERT_THAT(session.Allocate(0, kMiB, &src), GrpcIsOk());
  ASSERT_THAT(session.Allocate(1, kMiB, &dst), GrpcIsOk());
  IpcGate gate(session, socket_path());
  gate.Block(session, 0, 0);
  const std::string bytes = Pattern(kMiB, 41);
  ASSERT_THAT(Upload(session, src.allocation_id(), 0, bytes, On(0)),
              GrpcIsOk());  // queued behind the gate
  grpc::Status copied;
  std::thread copier([&] {
    copied =
        CopyDeviceToDevice(session, At(dst.allocation_id(), 0), At(src.allocation_id(), 0), kMiB);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  gate.Release();
  copier.join();
  ASSERT_THAT(copied, GrpcIsOk());
  std::string read;
  ASSERT_THAT(Download(session, dst.allocation_id(), 0, kMiB, &read), GrpcIsOk());
  EXPECT_EQ(FirstPatternMismatch(read.data(), read.size(), 41), read.size())
      << "copied before the upload ran";
}

TEST_F(CopyServiceTest, MemsetTakesOnlyByteValues) {
  RawSession session(channel_, "memset");
  v1::Allocation a;
  ASSERT_THAT(session.Allocate(0, 100, &a), GrpcIsOk());
  EXPECT_THAT(Memset(session, a.allocation_id(), 0, 100, 300),
              GrpcStatusIs(kInvalid, HasSubstr("300")));
  ASSERT_THAT(Memset(session, a.allocation_id(), 10, 80, 255), GrpcIsOk());
  std::string read;
  ASSERT_THAT(Download(session, a.allocation_id(), 0, 100, &read), GrpcIsOk());
  EXPECT_EQ(read, std::string(10, '\0') + std::string(80, '\xFF') + std::string(10, '\0'));
}

TEST_F(CopyServiceTest, RangesOutsideTheRequestedSizeAreOutOfRange) {
  RawSession session(channel_, "bounds");
  v1::Allocation a, b;
  ASSERT_THAT(session.Allocate(0, 1000, &a), GrpcIsOk());  // a 1024-byte block: 1000 usable
  ASSERT_THAT(session.Allocate(0, 1000, &b), GrpcIsOk());
  const uint64_t id = a.allocation_id();
  EXPECT_THAT(Memset(session, id, 1001, 0, 1), GrpcStatusIs(kOutOfRange));
  EXPECT_THAT(Memset(session, id, 0, 1001, 1), GrpcStatusIs(kOutOfRange, HasSubstr("1000 bytes")));
  EXPECT_THAT(Memset(session, id, 999, 2, 1), GrpcStatusIs(kOutOfRange));
  EXPECT_THAT(Memset(session, id, kMax - 8, 16, 1), GrpcStatusIs(kOutOfRange));
  EXPECT_THAT(Memset(session, id, 8, kMax, 1), GrpcStatusIs(kOutOfRange));
  EXPECT_THAT(Upload(session, id, 990, std::string(11, 'x')), GrpcStatusIs(kOutOfRange));
  std::string read;
  EXPECT_THAT(Download(session, id, kMax, 1, &read), GrpcStatusIs(kOutOfRange));
  EXPECT_THAT(CopyDeviceToDevice(session, At(b.allocation_id(), 0), At(id, 500), 501),
              GrpcStatusIs(kOutOfRange));
  EXPECT_THAT(CopyDeviceToDevice(session, At(b.allocation_id(), kMax), At(id, 0), 2),
              GrpcStatusIs(kOutOfRange));
  // Exactly up to the end is fine, as is an empty range at it.
  EXPECT_THAT(Memset(session, id, 999, 1, 1), GrpcIsOk());
  EXPECT_THAT(Memset(session, id, 1000, 0, 1), GrpcIsOk());
  EXPECT_THAT(Upload(session, id, 990, std::string(10, 'x')), GrpcIsOk());
}

TEST_F(CopyServiceTest, InlineCopiesAreCappedAt64MiB) {
  RawSession session(channel_, "inline-cap");
  v1::Allocation a;
  ASSERT_THAT(session.Allocate(0, 4096, &a), GrpcIsOk());
  v1::DeviceToHostRequest request;
  *request.mutable_src() = At(a.allocation_id(), 0);
  request.set_inline_size((64 * kMiB) + 1);
  v1::DeviceToHostResponse response;
  EXPECT_THAT(session.copy().DeviceToHost(session.Context().get(), request, &response),
              GrpcStatusIs(kInvalid, HasSubstr("staging buffer")));
}

TEST_F(CopyServiceTest, UnsetSourceOrDestinationIsInvalid) {
  RawSession session(channel_, "unset");
  v1::Allocation a;
  ASSERT_THAT(session.Allocate(0, 4096, &a), GrpcIsOk());
  v1::HostToDeviceRequest up;
  *up.mutable_dst() = At(a.allocation_id(), 0);
  v1::CopyResponse uploaded;
  EXPECT_THAT(session.copy().HostToDevice(session.Context().get(), up, &uploaded),
              GrpcStatusIs(kInvalid));
  v1::DeviceToHostRequest down;
  *down.mutable_src() = At(a.allocation_id(), 0);
  v1::DeviceToHostResponse downloaded;
  EXPECT_THAT(session.copy().DeviceToHost(session.Context().get(), down, &downloaded),
              GrpcStatusIs(kInvalid));
}

TEST_F(CopyServiceTest, OtherSessionsAndFreedAllocationsAreNotFound) {
  RawSession mine(channel_, "mine");
  RawSession theirs(channel_, "theirs");
  v1::Allocation own, foreign, freed;
  ASSERT_THAT(mine.Allocate(0, 4096, &own), GrpcIsOk());
  ASSERT_THAT(mine.Allocate(0, 4096, &freed), GrpcIsOk());
  ASSERT_THAT(mine.Free({freed.allocation_id()}), GrpcIsOk());
  ASSERT_THAT(theirs.Allocate(0, 4096, &foreign), GrpcIsOk());
  ASSERT_THAT(Upload(theirs, foreign.allocation_id(), 0, Pattern(4096, 5)), GrpcIsOk());
  for (uint64_t id : {foreign.allocation_id(), freed.allocation_id(), uint64_t{777777}}) {
    std::string read;
    EXPECT_THAT(Memset(mine, id, 0, 16, 0), GrpcStatusIs(kNotFound)) << id;
    EXPECT_THAT(Upload(mine, id, 0, "abc"), GrpcStatusIs(kNotFound)) << id;
    EXPECT_THAT(Download(mine, id, 0, 16, &read), GrpcStatusIs(kNotFound)) << id;
    EXPECT_THAT(CopyDeviceToDevice(mine, At(own.allocation_id(), 0), At(id, 0), 16),
                GrpcStatusIs(kNotFound))
        << id;
    EXPECT_THAT(CopyDeviceToDevice(mine, At(id, 0), At(own.allocation_id(), 0), 16),
                GrpcStatusIs(kNotFound))
        << id;
  }
  std::string read;
  ASSERT_THAT(Download(theirs, foreign.allocation_id(), 0, 4096, &read), GrpcIsOk());
  EXPECT_EQ(read, Pattern(4096, 5)) << "the owner's bytes were touched";
}

TEST_F(CopyServiceTest, CompletionEventIsAnInterprocessEventTheClientWaitsOn) {
  RawSession session(channel_, "completion");
  v1::Allocation a;
  ASSERT_THAT(session.Allocate(0, 4096, &a), GrpcIsOk());
  const uint64_t stream = NewStream(session, 0);
  IpcGate gate(session, socket_path());
  gate.Block(session, 0, stream);
  v1::CopyResponse queued;
  ASSERT_THAT(Memset(session, a.allocation_id(), 0, 4096, 0x5A,
                     On(stream, false, /*completion_event=*/true), &queued),
              GrpcIsOk());
  ASSERT_NE(queued.event(), 0u);
  ASSERT_EQ(queued.event_ipc_handle().size(), kHostIpcEventHandleBytes);

  absl::StatusOr<std::string> key = HostIpcEventKey(queued.event_ipc_handle());
  ASSERT_OK(key);
  absl::StatusOr<SealedMemory> file =
      FetchMemory(session, socket_path(), *key, kHostIpcEventFileBytes);
  ASSERT_OK(file);
  absl::StatusOr<std::unique_ptr<HostIpcEvent>> opened =
      HostIpcEvent::Adopt(*std::move(file), "completion");
  ASSERT_TRUE(opened.ok()) << opened.status();
  HostIpcEvent& event = **opened;
  const uint64_t generation = event.recorded();
  EXPECT_GE(generation, 1u);
  EXPECT_FALSE(event.IsComplete(generation));
  bool done = true;
  ASSERT_THAT(QueryEvent(session, queued.event(), &done), GrpcIsOk());
  EXPECT_FALSE(done);

  gate.Release();
  EXPECT_TRUE(event.WaitFor(generation, std::chrono::seconds(10)));
  EXPECT_THAT(SynchronizeEvent(session, queued.event()), GrpcIsOk());
  std::string read;
  ASSERT_THAT(Download(session, a.allocation_id(), 0, 4096, &read, stream), GrpcIsOk());
  EXPECT_EQ(read, std::string(4096, '\x5A'));
  EXPECT_THAT(DestroyEvent(session, queued.event()), GrpcIsOk());
  EXPECT_THAT(DestroyEvent(session, queued.event()), GrpcStatusIs(kNotFound));

  // Device to host asks for one the same way.
  v1::DeviceToHostRequest down;
  *down.mutable_src() = At(a.allocation_id(), 0);
  down.set_inline_size(8);
  *down.mutable_options() = On(0, false, /*completion_event=*/true);
  v1::DeviceToHostResponse downloaded;
  ASSERT_THAT(session.copy().DeviceToHost(session.Context().get(), down, &downloaded), GrpcIsOk());
  EXPECT_EQ(downloaded.data(), std::string(8, '\x5A'));
  EXPECT_NE(downloaded.event(), 0u);
  EXPECT_EQ(downloaded.event_ipc_handle().size(), kHostIpcEventHandleBytes);
  EXPECT_THAT(SynchronizeEvent(session, downloaded.event()), GrpcIsOk());
}

TEST_F(CopyServiceTest, FreeRightAfterAQueuedCopyOnAnotherStreamDoesNotCorruptTheNextAllocation) {
  RawSession session(channel_, "record-stream");
  const uint64_t side = NewStream(session, 0);
  v1::Allocation first;
  ASSERT_THAT(session.Allocate(0, 4 * kMiB, &first), GrpcIsOk());  // on the default stream
  IpcGate gate(session, socket_path());
  gate.Block(session, 0, side);
  // Queued on `side` behind the gate: the block is in use there after Free.
  ASSERT_THAT(Memset(session, first.allocation_id(), 0, 4 * kMiB, 0x11, On(side)), GrpcIsOk());
  ASSERT_THAT(session.Free({first.allocation_id()}), GrpcIsOk());
  EXPECT_EQ(BlockState(session, 0, first.address()), "active_pending_free");

  v1::Allocation second;
  ASSERT_THAT(session.Allocate(0, 4 * kMiB, &second), GrpcIsOk());
  EXPECT_NE(second.address(), first.address()) << "reused a block still in use on another stream";
  const std::string bytes = Pattern(4 * kMiB, 21);
  ASSERT_THAT(Upload(session, second.allocation_id(), 0, bytes), GrpcIsOk());
  gate.Release();
  ASSERT_THAT(SynchronizeStream(session, 0, side), GrpcIsOk());
  std::string read;
  ASSERT_THAT(Download(session, second.allocation_id(), 0, bytes.size(), &read), GrpcIsOk());
  EXPECT_EQ(FirstPatternMismatch(read.data(), read.size(), 21), read.size());

  // Once the work ran, the block is free for reuse.
  v1::Allocation third;
  ASSERT_THAT(session.Allocate(0, 4 * kMiB, &third), GrpcIsOk());
  EXPECT_EQ(third.address(), first.address());
}

// The repro of a use-after-free: the stream that used the block is destroyed
// before the free, so the free could not record an event on it and the block
// was reused while the stream's memset was still queued.
TEST_F(CopyServiceTest, DestroyingAStreamKeepsItsQueuedWorkGuardingTheBlocksItUsed) {
  RawSession session(channel_, "destroyed-stream");
  const uint64_t side = NewStream(session, 0);
  v1::Allocation first;
  ASSERT_THAT(session.Allocate(0, 4 * kMiB, &first), GrpcIsOk());  // on the default stream
  IpcGate gate(session, socket_path());
  gate.Block(session, 0, side);
  ASSERT_THAT(Memset(session, first.allocation_id(), 0, 4 * kMiB, 0xAA, On(side)), GrpcIsOk());
  ASSERT_THAT(DestroyStream(session, 0, side), GrpcIsOk());
  ASSERT_THAT(session.Free({first.allocation_id()}), GrpcIsOk());
  EXPECT_EQ(BlockState(session, 0, first.address()), "active_pending_free");

  v1::Allocation second;
  ASSERT_THAT(session.Allocate(0, 4 * kMiB, &second), GrpcIsOk());
  EXPECT_NE(second.address(), first.address())
      << "reused a block the destroyed stream still writes";
  const std::string bytes = Pattern(4 * kMiB, 22);
  ASSERT_THAT(Upload(session, second.allocation_id(), 0, bytes), GrpcIsOk());
  gate.Release();

  // Once the destroyed stream's memset ran, the block is reused.
  bool reused = false;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       !reused && std::chrono::steady_clock::now() < deadline;) {
    v1::Allocation third;
    ASSERT_THAT(session.Allocate(0, 4 * kMiB, &third), GrpcIsOk());
    reused = third.address() == first.address();
    ASSERT_THAT(session.Free({third.allocation_id()}), GrpcIsOk());
    if (!reused) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(reused) << "the block stayed pending after the destroyed stream drained";
  std::string read;
  ASSERT_THAT(Download(session, second.allocation_id(), 0, bytes.size(), &read), GrpcIsOk());
  EXPECT_EQ(FirstPatternMismatch(read.data(), read.size(), 22), read.size());
}

// A stream destroyed with no live block naming it costs no event, and blocks
// that only ever used it after their free are not held back.
TEST_F(CopyServiceTest, DestroyingAStreamAfterItsBlocksWereFreedHoldsNothingBack) {
  RawSession session(channel_, "destroyed-idle");
  const uint64_t side = NewStream(session, 0);
  v1::Allocation first;
  ASSERT_THAT(session.Allocate(0, 4 * kMiB, &first), GrpcIsOk());
  ASSERT_THAT(Memset(session, first.allocation_id(), 0, 4 * kMiB, 0x11, On(side, /*wait=*/true)),
              GrpcIsOk());
  ASSERT_THAT(session.Free({first.allocation_id()}), GrpcIsOk());
  ASSERT_THAT(SynchronizeStream(session, 0, side), GrpcIsOk());  // the free's event ran
  ASSERT_THAT(DestroyStream(session, 0, side), GrpcIsOk());
  v1::Allocation second;
  ASSERT_THAT(session.Allocate(0, 4 * kMiB, &second), GrpcIsOk());
  EXPECT_EQ(second.address(), first.address());
}

TEST_F(CopyServiceTest, FreeWithAWaitEventHandleHoldsTheBlockUntilTheEventCompletes) {
  RawSession session(channel_, "free-wait");
  v1::Allocation first;
  ASSERT_THAT(session.Allocate(1, 512 * 1024, &first), GrpcIsOk());
  IpcGate client_work(session, socket_path(),
                      /*device=*/1);  // the client's own stream still reading the block
  v1::FreeRequest free;
  free.add_allocation_ids(first.allocation_id());
  free.add_wait_event_handles(client_work.handle());
  v1::FreeResponse freed;
  ASSERT_THAT(session.memory().Free(session.Context().get(), free, &freed), GrpcIsOk());
  EXPECT_EQ(BlockState(session, 1, first.address()), "active_pending_free");
  EXPECT_THAT(session.Free({first.allocation_id()}), GrpcStatusIs(kNotFound)) << "already freed";

  v1::Allocation second;
  ASSERT_THAT(session.Allocate(1, 512 * 1024, &second), GrpcIsOk());
  EXPECT_NE(second.address(), first.address());

  client_work.Release();
  v1::Allocation third;
  ASSERT_THAT(session.Allocate(1, 512 * 1024, &third), GrpcIsOk());
  EXPECT_EQ(third.address(), first.address());
}

TEST_F(CopyServiceTest, FreeWithABadWaitEventHandleFreesNothing) {
  RawSession session(channel_, "free-bad");
  v1::Allocation a, b;
  ASSERT_THAT(session.Allocate(0, 4096, &a), GrpcIsOk());
  ASSERT_THAT(session.Allocate(0, 4096, &b), GrpcIsOk());
  IpcGate good(session, socket_path());
  good.Release();
  auto free_with = [&](const std::string& handle) {
    v1::FreeRequest request;
    request.add_allocation_ids(a.allocation_id());
    request.add_allocation_ids(b.allocation_id());
    request.add_wait_event_handles(good.handle());
    request.add_wait_event_handles(handle);
    v1::FreeResponse response;
    return session.memory().Free(session.Context().get(), request, &response);
  };
  EXPECT_THAT(free_with(std::string(10, 'h')), GrpcStatusIs(kInvalid, HasSubstr("64")));
  EXPECT_THAT(free_with(std::string(64, 'h')), GrpcStatusIs(kInvalid));
  EXPECT_EQ(BlockState(session, 0, a.address()), "active_allocated");
  EXPECT_EQ(BlockState(session, 0, b.address()), "active_allocated");
  EXPECT_THAT(session.Free({a.allocation_id(), b.allocation_id()}), GrpcIsOk());
}

TEST_F(CopyServiceTest, FreeWaitingOnAGoneEventIsNotFoundAndFreesNothing) {
  RawSession session(channel_, "free-gone");
  v1::Allocation a;
  ASSERT_THAT(session.Allocate(0, 4096, &a), GrpcIsOk());
  std::string gone_handle;
  {
    IpcGate gone(session, socket_path());
    gone_handle = gone.handle();
    gone.Destroy();
  }
  v1::FreeRequest request;
  request.add_allocation_ids(a.allocation_id());
  request.add_wait_event_handles(gone_handle);
  v1::FreeResponse response;
  EXPECT_THAT(session.memory().Free(session.Context().get(), request, &response),
              GrpcStatusIs(kNotFound));
  EXPECT_EQ(BlockState(session, 0, a.address()), "active_allocated");
}

TEST_F(CopyServiceTest, RecordStreamNeedsAStreamOfTheAllocationsDevice) {
  RawSession session(channel_, "record");
  v1::Allocation a;
  ASSERT_THAT(session.Allocate(0, 4096, &a), GrpcIsOk());
  const uint64_t on_zero = NewStream(session, 0);
  const uint64_t on_one = NewStream(session, 1);
  auto record = [&](uint64_t allocation, uint64_t stream) {
    v1::RecordStreamRequest request;
    request.set_allocation_id(allocation);
    request.set_stream(stream);
    v1::RecordStreamResponse response;
    return session.memory().RecordStream(session.Context().get(), request, &response);
  };
  EXPECT_THAT(record(a.allocation_id(), 123456), GrpcStatusIs(kNotFound));
  EXPECT_THAT(record(a.allocation_id(), on_one), GrpcStatusIs(kInvalid));
  EXPECT_THAT(record(999999, on_zero), GrpcStatusIs(kNotFound));
  EXPECT_THAT(record(a.allocation_id(), on_zero), GrpcIsOk());
  EXPECT_THAT(record(a.allocation_id(), 0), GrpcIsOk());
}

}  // namespace
}  // namespace gpumux::testing
