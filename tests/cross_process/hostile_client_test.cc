// A hostile client against a real gpumuxd in its own process: it fetches
// every memory file it was given (its segments on both devices, its staging
// buffer, an interprocess event it created, a copy's completion event) and
// tries to break each one: truncate, grow, add seals, punch holes, unmap and
// remap read-write, write garbage everywhere. Then the daemon uses all of
// that memory (memsets, staged copies, event queries), and another session
// works on as before: no SIGBUS, no crash, nothing of the other session's
// touched. The daemon exits cleanly at the end.

#include <fcntl.h>
#include <linux/falloc.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gpumux/common/host_ipc_event.h"
#include "gpumux/common/sealed_memory.h"
#include "gpumux/v1/copy.grpc.pb.h"
#include "gpumux/v1/memory.grpc.pb.h"
#include "gpumux/v1/stream.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/support/raw_session.h"

namespace gpumux::testing {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

std::string Garbage(size_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string bytes(size, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  return bytes;
}

// Everything a client can do to a memory file it holds, short of
// exhausting memory. Each attempt on the file's size or seals must fail.
void Attack(const SealedMemory& memory, uint32_t seed) {
  const int fd = memory.fd();
  const uint64_t size = memory.size();
  EXPECT_NE(ftruncate(fd, 0), 0) << "truncated to 0";
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(ftruncate(fd, static_cast<off_t>(size / 2)), 0) << "shrunk";
  EXPECT_NE(ftruncate(fd, static_cast<off_t>(size * 2)), 0) << "grown";
  EXPECT_NE(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), 0) << "sealed against the daemon's writes";
  EXPECT_NE(fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE), 0);
  // Holes are allowed (the file keeps its size): the pages come back as
  // zeros on the next touch, never as a fault.
  fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(size));
  void* first = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(first, MAP_FAILED);
  const std::string garbage = Garbage(size, seed);
  std::memcpy(first, garbage.data(), size);
  ASSERT_EQ(munmap(first, size), 0);
  void* again = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(again, MAP_FAILED);
  EXPECT_EQ(std::memcmp(again, garbage.data(), size), 0);
  std::memset(again, 0xff, size);
  munmap(again, size);
}

class HostileClientTest : public ::testing::Test {
 protected:
  HostileClientTest() : daemon_({"--host-devices=2", "--host-device-memory=256MiB"}) {}

  absl::StatusOr<SealedMemory> Fetch(const RawSession& session, const std::string& key,
                                     uint64_t size) {
    return FetchMemory(session, daemon_.socket_path(), key, size);
  }

  DaemonProcess daemon_;
};

grpc::Status Memset(RawSession& session, uint64_t allocation, uint64_t size, uint32_t value) {
  v1::MemsetRequest request;
  request.mutable_dst()->set_allocation_id(allocation);
  request.set_size(size);
  request.set_value(value);
  request.mutable_options()->set_wait(true);
  v1::CopyResponse response;
  return session.copy().Memset(session.Context().get(), request, &response);
}

grpc::Status Download(RawSession& session, uint64_t allocation, uint64_t size, std::string* out) {
  v1::DeviceToHostRequest request;
  request.mutable_src()->set_allocation_id(allocation);
  request.set_inline_size(size);
  v1::DeviceToHostResponse response;
  grpc::Status status = session.copy().DeviceToHost(session.Context().get(), request, &response);
  *out = response.data();
  return status;
}

TEST_F(HostileClientTest, BreakingEverythingItWasGivenHurtsNoOtherSession) {
  RawSession victim(daemon_.channel(), "victim");
  v1::Allocation kept;
  ASSERT_TRUE(victim.Allocate(0, 4 * kMiB, &kept).ok());
  ASSERT_TRUE(Memset(victim, kept.allocation_id(), 4 * kMiB, 0x5a).ok());

  RawSession hostile(daemon_.channel(), "hostile");
  std::vector<v1::Allocation> segments(2);
  for (int d = 0; d < 2; ++d) ASSERT_TRUE(hostile.Allocate(d, 3 * kMiB, &segments[d]).ok());
  v1::GetStagingBufferRequest staging_request;
  v1::StagingBuffer staging;
  ASSERT_TRUE(
      hostile.copy().GetStagingBuffer(hostile.Context().get(), staging_request, &staging).ok());
  v1::CreateEventRequest create;
  create.set_device(0);
  create.set_interprocess(true);
  v1::CreateEventResponse event;
  ASSERT_TRUE(hostile.event().Create(hostile.Context().get(), create, &event).ok());
  v1::EventRequest event_request;
  event_request.set_event(event.event());
  v1::GetIpcHandleResponse event_handle;
  ASSERT_TRUE(
      hostile.event().GetIpcHandle(hostile.Context().get(), event_request, &event_handle).ok());
  v1::MemsetRequest with_event;
  with_event.mutable_dst()->set_allocation_id(segments[0].allocation_id());
  with_event.set_size(4096);
  with_event.mutable_options()->set_completion_event(true);
  v1::CopyResponse completion;
  ASSERT_TRUE(hostile.copy().Memset(hostile.Context().get(), with_event, &completion).ok());

  // Everything it was given, as the memory socket hands it out.
  uint32_t seed = 1;
  for (const v1::Allocation& a : segments) {
    absl::StatusOr<SealedMemory> file = Fetch(hostile, a.segment_handle().data(), a.segment_size());
    ASSERT_TRUE(file.ok()) << file.status();
    Attack(*file, seed++);
  }
  absl::StatusOr<SealedMemory> staging_file =
      Fetch(hostile, staging.handle().data(), staging.size());
  ASSERT_TRUE(staging_file.ok()) << staging_file.status();
  Attack(*staging_file, seed++);
  for (const std::string& handle : {event_handle.handle(), completion.event_ipc_handle()}) {
    absl::StatusOr<std::string> key = HostIpcEventKey(handle);
    ASSERT_TRUE(key.ok()) << key.status();
    absl::StatusOr<SealedMemory> file = Fetch(hostile, *key, kHostIpcEventFileBytes);
    ASSERT_TRUE(file.ok()) << file.status();
    Attack(*file, seed++);
  }
  // The victim's memory is not the hostile session's to fetch... except by
  // its key, which only the victim was given; its staging buffer is its own.
  v1::GetStagingBufferRequest victim_staging_request;
  v1::StagingBuffer victim_staging;
  ASSERT_TRUE(victim.copy()
                  .GetStagingBuffer(victim.Context().get(), victim_staging_request, &victim_staging)
                  .ok());
  absl::StatusOr<SealedMemory> stolen =
      Fetch(hostile, victim_staging.handle().data(), victim_staging.size());
  EXPECT_EQ(stolen.status().code(), absl::StatusCode::kPermissionDenied);

  // The daemon touches all of it: memsets into the broken segments, a
  // staged copy through the broken staging buffer, queries of the broken
  // events. Each answers; none kills the daemon.
  for (const v1::Allocation& a : segments) {
    EXPECT_TRUE(Memset(hostile, a.allocation_id(), 3 * kMiB, 0x11).ok());
  }
  v1::HostToDeviceRequest staged;
  staged.mutable_dst()->set_allocation_id(segments[1].allocation_id());
  staged.mutable_staging()->set_offset(0);
  staged.mutable_staging()->set_size(staging.size());
  staged.mutable_options()->set_wait(true);
  v1::CopyResponse staged_done;
  EXPECT_TRUE(hostile.copy().HostToDevice(hostile.Context().get(), staged, &staged_done).ok());
  std::string back;
  ASSERT_TRUE(Download(hostile, segments[1].allocation_id(), 4096, &back).ok());
  EXPECT_EQ(back, std::string(4096, '\xff')) << "the staged copy read what the client last wrote";
  v1::QueryEventResponse queried;
  EXPECT_TRUE(hostile.event().Query(hostile.Context().get(), event_request, &queried).ok());
  v1::EventRequest completion_request;
  completion_request.set_event(completion.event());
  EXPECT_TRUE(hostile.event().Query(hostile.Context().get(), completion_request, &queried).ok());

  // The victim's bytes are as it left them, and it works on.
  std::string kept_bytes;
  ASSERT_TRUE(Download(victim, kept.allocation_id(), 4096, &kept_bytes).ok());
  EXPECT_EQ(kept_bytes, std::string(4096, '\x5a'));
  v1::Allocation more;
  ASSERT_TRUE(victim.Allocate(1, 2 * kMiB, &more).ok());
  EXPECT_TRUE(Memset(victim, more.allocation_id(), 2 * kMiB, 0x33).ok());
  EXPECT_TRUE(victim.Ping().ok());

  // The hostile session leaves; so does the victim; the daemon stops cleanly.
  EXPECT_TRUE(hostile.Close().ok());
  EXPECT_TRUE(victim.Close().ok());
  const int status = daemon_.Stop();
  ASSERT_TRUE(WIFEXITED(status)) << "gpumuxd died of signal "
                                 << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// Descriptors must not outlive the books: a client that keeps the memory
// files of what it freed, round after round, once held 1,800 MiB of host
// memory while its reserved bytes, the device's books and `gpumux sessions`
// all said 0. The daemon takes the pages of a segment or page it releases
// back from the file, so a kept file holds nothing.
class KeptDescriptorsTest : public ::testing::TestWithParam<const char*> {};

TEST_P(KeptDescriptorsTest, HoldNoMemoryOnceTheDaemonReleasedIt) {
  DaemonProcess daemon({"--host-devices=1", "--host-device-memory=64MiB",
                        absl::StrCat("--allocator-conf=", GetParam())});
  RawSession hoarder(daemon.channel(), "hoarder");
  constexpr uint64_t kSize = 24 * kMiB;
  std::vector<SealedMemory> kept;
  for (int round = 0; round < 10; ++round) {
    v1::Allocation a;
    ASSERT_TRUE(hoarder.Allocate(0, kSize, &a).ok()) << "round " << round;
    ASSERT_TRUE(Memset(hoarder, a.allocation_id(), kSize, 0x5a).ok());
    if (a.pages_size() == 0) {
      absl::StatusOr<SealedMemory> file =
          FetchMemory(hoarder, daemon.socket_path(), a.segment_handle().data(), a.segment_size());
      ASSERT_TRUE(file.ok()) << file.status();
      kept.push_back(*std::move(file));
    }
    for (const v1::PageHandle& page : a.pages()) {
      absl::StatusOr<SealedMemory> file =
          FetchMemory(hoarder, daemon.socket_path(), page.key(), page.size());
      ASSERT_TRUE(file.ok()) << file.status();
      kept.push_back(*std::move(file));
    }
    ASSERT_TRUE(hoarder.Free({a.allocation_id()}).ok());
    v1::EmptyCacheRequest empty;
    empty.set_device(0);
    v1::EmptyCacheResponse emptied;
    ASSERT_TRUE(hoarder.memory().EmptyCache(hoarder.Context().get(), empty, &emptied).ok());
  }
  // What the kept files still hold, in bytes of memory behind them.
  auto held = [&] {
    uint64_t bytes = 0;
    for (const SealedMemory& file : kept) {
      struct stat st {};
      EXPECT_EQ(fstat(file.fd(), &st), 0);
      bytes += static_cast<uint64_t>(st.st_blocks) * 512;
    }
    return bytes;
  };
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (held() != 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(held(), 0u) << kept.size() << " kept files";
  // A kept file reads zeros: nothing of the memory is left in it.
  absl::StatusOr<MemoryMapping> view = kept.front().Map(/*writable=*/false);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(static_cast<const char*>(view->data())[0], '\0');
  EXPECT_TRUE(hoarder.Close().ok());
}

INSTANTIATE_TEST_SUITE_P(Modes, KeptDescriptorsTest,
                         ::testing::Values("expandable_segments:False", "compact_segments:True"),
                         [](const ::testing::TestParamInfo<const char*>& param) {
                           return std::string(param.index == 0 ? "default" : "compact");
                         });

// Compact mode hands a client its expandable segment page by page: it breaks
// every page it was given, frees them and has the daemon unmap them. The
// daemon works on, never faults, and exits cleanly.
TEST(HostileCompactClientTest, BreakingItsPagesHurtsNoOtherSession) {
  DaemonProcess daemon({"--host-devices=1", "--host-device-memory=256MiB",
                        "--allocator-conf=compact_segments:True"});
  RawSession victim(daemon.channel(), "victim");
  v1::Allocation kept;
  ASSERT_TRUE(victim.Allocate(0, 4 * kMiB, &kept).ok());
  ASSERT_TRUE(Memset(victim, kept.allocation_id(), 4 * kMiB, 0x5a).ok());

  RawSession hostile(daemon.channel(), "hostile");
  std::vector<v1::Allocation> blocks(2);
  for (v1::Allocation& a : blocks) ASSERT_TRUE(hostile.Allocate(0, 3 * kMiB, &a).ok());
  ASSERT_EQ(blocks[1].segment_handle().kind(), v1::HANDLE_KIND_HOST_PAGES);
  ASSERT_EQ(blocks[1].segment_id(), blocks[0].segment_id());  // grown, not a new segment
  ASSERT_EQ(blocks[1].pages_size(), 2);
  uint32_t seed = 1;
  for (const v1::Allocation& a : blocks) {
    for (const v1::PageHandle& page : a.pages()) {
      absl::StatusOr<SealedMemory> file =
          FetchMemory(hostile, daemon.socket_path(), page.key(), page.size());
      ASSERT_TRUE(file.ok()) << file.status();
      Attack(*file, seed++);
    }
  }
  // The daemon writes and reads all of it.
  for (const v1::Allocation& a : blocks) {
    EXPECT_TRUE(Memset(hostile, a.allocation_id(), 3 * kMiB, 0x11).ok());
  }
  std::string back;
  ASSERT_TRUE(Download(hostile, blocks[1].allocation_id(), 3 * kMiB, &back).ok());
  EXPECT_EQ(back, std::string(3 * kMiB, '\x11'));

  // Freed and unmapped: their keys fetch nothing any more.
  v1::FreeRequest free;
  for (const v1::Allocation& a : blocks) free.add_allocation_ids(a.allocation_id());
  v1::FreeResponse freed;
  ASSERT_TRUE(hostile.memory().Free(hostile.Context().get(), free, &freed).ok());
  v1::EmptyCacheRequest empty;
  empty.set_device(0);
  v1::EmptyCacheResponse emptied;
  ASSERT_TRUE(hostile.memory().EmptyCache(hostile.Context().get(), empty, &emptied).ok());
  const v1::PageHandle& gone = blocks[1].pages(1);
  EXPECT_EQ(FetchMemory(hostile, daemon.socket_path(), gone.key(), gone.size()).status().code(),
            absl::StatusCode::kNotFound);

  // The victim's bytes are as it left them, and it works on.
  std::string kept_bytes;
  ASSERT_TRUE(Download(victim, kept.allocation_id(), 4096, &kept_bytes).ok());
  EXPECT_EQ(kept_bytes, std::string(4096, '\x5a'));
  v1::Allocation more;
  ASSERT_TRUE(victim.Allocate(0, 6 * kMiB, &more).ok());
  EXPECT_TRUE(Memset(victim, more.allocation_id(), 6 * kMiB, 0x33).ok());
  EXPECT_TRUE(hostile.Close().ok());
  EXPECT_TRUE(victim.Close().ok());
  const int status = daemon.Stop();
  ASSERT_TRUE(WIFEXITED(status)) << "gpumuxd died of signal "
                                 << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace gpumux::testing
