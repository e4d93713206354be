// SealedMemory and descriptor passing: a memory file handed to another
// process (a real child over a socketpair) is mapped there, shares the bytes,
// and cannot be truncated or grown by it; what is not sealed is refused.

#include "gpumux/common/sealed_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <string>

#include "common/ipc/fd_passing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::StatusIs;
using ::testing::HasSubstr;

TEST(SealedMemoryTest, IsZeroedBackedAndCannotChangeSize) {
  absl::StatusOr<SealedMemory> memory = SealedMemory::Create("gpumux-test", 2 << 20);
  ASSERT_OK(memory);
  absl::StatusOr<MemoryMapping> mapping = memory->Map();
  ASSERT_OK(mapping);
  const auto* bytes = static_cast<const unsigned char*>(mapping->data());
  for (size_t i = 0; i < mapping->size(); i += 4096) ASSERT_EQ(bytes[i], 0) << i;
  EXPECT_NE(ftruncate(memory->fd(), 4096), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(ftruncate(memory->fd(), 4 << 20), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(fcntl(memory->fd(), F_ADD_SEALS, F_SEAL_WRITE), 0) << "sealing is sealed too";
  // Nothing of it is in /dev/shm: it has no name anyone can open.
  EXPECT_NE(access("/dev/shm/gpumux-test", F_OK), 0);
}

TEST(SealedMemoryTest, MoreThanTheMachineHasIsResourceExhaustedAtOnce) {
  // 1 TiB: no test machine has it available, and nothing may be touched.
  EXPECT_THAT(
      SealedMemory::Create("gpumux-test-huge", uint64_t{1} << 40),
      StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("bytes of memory are available")));
}

TEST(SealedMemoryTest, RefusesBadSizes) {
  EXPECT_THAT(SealedMemory::Create("zero", 0), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(SealedMemory::Create("huge", uint64_t{1} << 41),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(SealedMemoryTest, AdoptRefusesWhatCouldShrinkUnderAMapping) {
  UniqueFd plain(memfd_create("unsealed", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  ASSERT_TRUE(plain.valid());
  ASSERT_EQ(ftruncate(plain.get(), 4096), 0);
  EXPECT_THAT(SealedMemory::Adopt(std::move(plain), 4096),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not sealed")));
  UniqueFd pipe_end;
  int ends[2];
  ASSERT_EQ(pipe(ends), 0);
  pipe_end = UniqueFd(ends[0]);
  close(ends[1]);
  EXPECT_THAT(
      SealedMemory::Adopt(std::move(pipe_end), 4096),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a sealable memory file")));
  absl::StatusOr<SealedMemory> sealed = SealedMemory::Create("sealed", 8192);
  ASSERT_OK(sealed);
  EXPECT_THAT(SealedMemory::Adopt(UniqueFd(dup(sealed->fd())), 4096),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("8192 bytes, not the 4096")));
  EXPECT_OK(SealedMemory::Adopt(UniqueFd(dup(sealed->fd())), 8192));
}

// The child adopts what it received, writes through its mapping, and tries
// to truncate it: it reports ftruncate's errno as its exit status.
TEST(FdPassingTest, AnotherProcessMapsTheMemoryButCannotTruncateIt) {
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  UniqueFd parent_end(pair[0]), child_end(pair[1]);
  absl::StatusOr<SealedMemory> memory = SealedMemory::Create("gpumux-passed", 1 << 20);
  ASSERT_OK(memory);
  absl::StatusOr<MemoryMapping> mine = memory->Map();
  ASSERT_OK(mine);

  const pid_t child = fork();
  if (child == 0) {
    parent_end.Reset();
    absl::StatusOr<PassedMessage> got = ReceiveFds(child_end.get());
    if (!got.ok() || got->payload != "segment 7" || got->fds.size() != 1) _exit(100);
    absl::StatusOr<SealedMemory> adopted = SealedMemory::Adopt(std::move(got->fds[0]), 1 << 20);
    if (!adopted.ok()) _exit(101);
    absl::StatusOr<MemoryMapping> theirs = adopted->Map();
    if (!theirs.ok()) _exit(102);
    std::memcpy(theirs->data(), "written by the child", 21);
    _exit(ftruncate(adopted->fd(), 0) == 0 ? 0 : errno);
  }
  child_end.Reset();
  const int fds[] = {memory->fd()};
  ASSERT_OK(SendFds(parent_end.get(), "segment 7", fds));
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), EPERM) << "the child could truncate (0) or failed early (100+)";
  EXPECT_STREQ(static_cast<const char*>(mine->data()), "written by the child");
  // Our mapping still works after the child's attempt: no SIGBUS.
  static_cast<char*>(mine->data())[(1 << 20) - 1] = 1;
}

TEST(FdPassingTest, LimitsAndTheEndOfTheSocket) {
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  UniqueFd a(pair[0]), b(pair[1]);
  EXPECT_THAT(SendFds(a.get(), "", {}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(SendFds(a.get(), std::string(kMaxPassedPayload + 1, 'x'), {}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  std::vector<int> too_many(kMaxPassedFds + 1, a.get());
  EXPECT_THAT(SendFds(a.get(), "x", too_many), StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_OK(SendFds(a.get(), "no descriptors", {}));
  absl::StatusOr<PassedMessage> got = ReceiveFds(b.get());
  ASSERT_OK(got);
  EXPECT_EQ(got->payload, "no descriptors");
  EXPECT_TRUE(got->fds.empty());
  a.Reset();
  EXPECT_THAT(ReceiveFds(b.get()), StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("closed")));
}

// The memory file budget refuses past it, says where it comes from, and
// lets files in again as others close.
TEST(MemoryFileBudgetTest, RefusesPastTheBudgetUntilFilesClose) {
  const size_t open = OpenMemoryFiles();
  SetMemoryFileBudget(open + 2, "two more, for the test");
  {
    absl::StatusOr<SealedMemory> first = SealedMemory::Create("first", 4096);
    absl::StatusOr<SealedMemory> second = SealedMemory::Create("second", 4096);
    ASSERT_OK(first);
    ASSERT_OK(second);
    EXPECT_EQ(OpenMemoryFiles(), open + 2);
    EXPECT_THAT(SealedMemory::Create("third", 4096),
                StatusIs(absl::StatusCode::kResourceExhausted,
                         HasSubstr("no memory file for third: " + std::to_string(open + 2) +
                                   " are open, the most this process may hold (two more, for "
                                   "the test)")));
    // A moved file counts once.
    SealedMemory moved = *std::move(first);
    EXPECT_EQ(OpenMemoryFiles(), open + 2);
  }
  EXPECT_EQ(OpenMemoryFiles(), open);
  EXPECT_OK(SealedMemory::Create("again", 4096).status());
  SetMemoryFileBudget(std::numeric_limits<size_t>::max(), "unlimited");
}

}  // namespace
}  // namespace gpumux
