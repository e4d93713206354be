// MemoryFileTable: sealed memory files and exportable memory (a CUDA page's,
// here a stand-in that exports memfds) under random keys, what each lookup
// hands out, and who may have it.

#include "server/backend/memory_file_table.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <atomic>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::StatusIs;
using ::testing::HasSubstr;

// Exports a new memfd of its size per call, or fails with `failure`.
class FakeExportable final : public ExportableMemory {
 public:
  FakeExportable(uint64_t size, std::atomic<int>* alive) : size_(size), alive_(alive) { ++*alive_; }
  ~FakeExportable() override { --*alive_; }
  uint64_t size() const override { return size_; }
  absl::StatusOr<UniqueFd> Export() const override {
    if (!failure.ok()) return failure;
    ++exports;
    UniqueFd fd(memfd_create("fake-page", MFD_CLOEXEC));
    if (!fd.valid() || ftruncate(fd.get(), static_cast<off_t>(size_)) != 0)
      return absl::InternalError("memfd");
    return fd;
  }
  absl::Status failure;
  mutable int exports = 0;

 private:
  const uint64_t size_;
  std::atomic<int>* const alive_;
};

constexpr SessionId kSession(7);
constexpr SessionId kOther(8);

TEST(MemoryFileTableTest, ExportableMemoryGetsAFreshDescriptorPerOpen) {
  MemoryFileTable table;
  std::atomic<int> alive{0};
  auto page = std::make_shared<FakeExportable>(2 << 20, &alive);
  const std::string key = table.Add(page);
  EXPECT_EQ(key.size(), 32u);
  absl::StatusOr<FiledDescriptor> first = table.Open(key, kSession);
  absl::StatusOr<FiledDescriptor> second = table.Open(key, kSession);
  ASSERT_OK(first);
  ASSERT_OK(second);
  EXPECT_EQ(first->size, uint64_t{2} << 20);
  EXPECT_EQ(first->memory, nullptr);
  EXPECT_NE(first->fd(), second->fd());
  struct stat st {};
  ASSERT_EQ(fstat(first->fd(), &st), 0);
  EXPECT_EQ(st.st_size, 2 << 20);
  EXPECT_EQ(page->exports, 2);
  // Not a memory file: Find (for sealed memory) refuses it.
  EXPECT_THAT(table.Find(key, kSession),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("device memory")));
  page->failure = absl::ResourceExhaustedError("no descriptors left");
  EXPECT_THAT(table.Open(key, kSession), StatusIs(absl::StatusCode::kResourceExhausted));
  // Removed, the key finds nothing, and the memory goes with its last holder.
  table.Remove(key);
  EXPECT_THAT(table.Open(key, kSession), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(alive.load(), 1);
  page.reset();
  EXPECT_EQ(alive.load(), 0);
  EXPECT_EQ(table.size(), 0u);
}

TEST(MemoryFileTableTest, SealedMemoryOpensWithItsOwnDescriptor) {
  MemoryFileTable table;
  absl::StatusOr<SealedMemory> memory = SealedMemory::Create("table-test", 4096);
  ASSERT_OK(memory);
  auto shared = std::make_shared<const SealedMemory>(*std::move(memory));
  const std::string key = table.Add(shared, kSession);
  absl::StatusOr<FiledDescriptor> filed = table.Open(key, kSession);
  ASSERT_OK(filed);
  EXPECT_EQ(filed->fd(), shared->fd());
  EXPECT_EQ(filed->size, 4096u);
  EXPECT_FALSE(filed->exported.valid());
  EXPECT_THAT(table.Find(key, kSession), ::gpumux::testing::IsOkAndHolds(shared));
  // Reserved for one session: any other is refused, by both lookups.
  EXPECT_THAT(table.Open(key, kOther), StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(table.Find(key, kOther), StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(table.Open(std::string(32, 'a'), kSession), StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace gpumux
