// The torch.cuda 1.6 functions without a section of their own, against the
// real daemon (host backend): is_available, init/is_initialized,
// get_device_capability, get_arch_list, get_gencode_flags, device_of,
// ipc_collect, current_blas_handle, reset_max_memory_allocated and the
// deprecated *_cached names.

#include <cstring>
#include <map>
#include <optional>
#include <string>

#include "client/client_testing.h"
#include "gmock/gmock.h"
#include "gpumux/client.h"
#include "gpumux/guards.h"
#include "gpumux/memory.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"
#include "tests/support/daemon_client_test.h"

namespace gpumux::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Pair;

// The daemon's small segments (PyTorch's kSmallBuffer).
constexpr uint64_t kSmallSegment = uint64_t{2} << 20;

class TorchCudaFunctionsTest : public DaemonClientTest {};

ClientOptions WithAllocation(AllocationMode mode) {
  ClientOptions options;
  options.allocation = mode;
  return options;
}

// Pinned to daemon-side allocation: with local allocation Connect does what
// Init does (the allocator needs the device count and the memory socket).
class LazyInitTest : public DaemonClientTest {
 protected:
  LazyInitTest() : DaemonClientTest({.client = WithAllocation(AllocationMode::kDaemon)}) {}
};

// Pinned to daemon-side allocation: the mappings of daemon segments; a local
// client's leases stay mapped while its allocator caches them.
class DaemonSegmentsTest : public DaemonClientTest {
 protected:
  DaemonSegmentsTest() : DaemonClientTest({.client = WithAllocation(AllocationMode::kDaemon)}) {}
};

TEST_F(TorchCudaFunctionsTest, IsAvailableWhenADaemonWithDevicesAnswers) {
  EXPECT_TRUE(Client::IsAvailable(daemon().address()));
  EXPECT_TRUE(Client::IsAvailable(daemon().socket_path()));
  const absl::Time before = absl::Now();
  EXPECT_FALSE(Client::IsAvailable("unix:///nonexistent/gpumux.sock", absl::Milliseconds(200)));
  EXPECT_LT(absl::Now() - before, absl::Seconds(2));
  // The probe opened no session.
  EXPECT_EQ(daemon().Sessions().size(), 1u);
}

TEST_F(LazyInitTest, InitDoesNowWhatFirstUseWouldDo) {
  const ClientOptions daemon_side = WithAllocation(AllocationMode::kDaemon);
  std::unique_ptr<Client> fresh = ConnectAnother(daemon_side);
  ASSERT_NE(fresh, nullptr);
  EXPECT_FALSE(fresh->IsInitialized());
  ASSERT_OK(fresh->Init());
  EXPECT_TRUE(fresh->IsInitialized());
  ASSERT_OK(fresh->Init());  // again: nothing to do

  // The calls that need it do it too.
  std::unique_ptr<Client> used = ConnectAnother(daemon_side);
  ASSERT_NE(used, nullptr);
  ASSERT_OK(used->SetDevice(DeviceIndex(1)));
  EXPECT_FALSE(used->IsInitialized());  // the memory socket is not connected yet
  ASSERT_OK(memory::Allocate(*used, 4096, DeviceIndex(1)));
  EXPECT_TRUE(used->IsInitialized());
}

TEST_F(LazyInitTest, InitFailsWhenTheDaemonIsGone) {
  daemon().Shutdown();
  EXPECT_THAT(client().Init(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_FALSE(client().IsInitialized());
}

TEST_F(TorchCudaFunctionsTest, LocalAllocationInitializesAtConnect) {
  std::unique_ptr<Client> local = ConnectAnother(WithAllocation(AllocationMode::kLocal));
  ASSERT_NE(local, nullptr);
  EXPECT_TRUE(local->IsInitialized());
  daemon().Shutdown();
  EXPECT_OK(local->Init());  // nothing left to do
}

TEST_F(TorchCudaFunctionsTest, DeviceCapabilityArchListAndGencodeFlags) {
  // The host backend's devices are compute capability 0.0.
  EXPECT_THAT(client().GetDeviceCapability(), IsOkAndHolds(Pair(0, 0)));
  ASSERT_OK(client().SetDevice(DeviceIndex(1)));
  EXPECT_THAT(client().GetDeviceCapability(), IsOkAndHolds(Pair(0, 0)));
  EXPECT_THAT(client().GetDeviceCapability(DeviceIndex(5)),
              StatusIs(absl::StatusCode::kInvalidArgument));

  // The daemon's build, as every device reports it.
  absl::StatusOr<DeviceProperties> properties = client().GetDeviceProperties(DeviceIndex(0));
  ASSERT_OK(properties);
  EXPECT_THAT(client().GetArchList(), IsOkAndHolds(properties->arch_list));
  EXPECT_THAT(client().GetGencodeFlags(), IsOkAndHolds(properties->gencode_flags));
}

// torch.cuda's memory functions take the current device when given none,
// not device 0.
TEST_F(TorchCudaFunctionsTest, MemoryFunctionsDefaultToTheCurrentDevice) {
  ASSERT_OK(client().SetDevice(DeviceIndex(1)));
  auto on_one = std::make_optional(memory::Allocate(client(), 1 << 20, DeviceIndex(1)));
  ASSERT_OK(on_one->status());
  EXPECT_THAT(memory::MemoryAllocated(client()), IsOkAndHolds(1 << 20));
  EXPECT_THAT(memory::MaxMemoryAllocated(client()), IsOkAndHolds(1 << 20));
  EXPECT_THAT(memory::MemoryAllocated(client(), DeviceIndex(0)), IsOkAndHolds(0));
  absl::StatusOr<std::map<std::string, int64_t>> stats = memory::MemoryStats(client());
  ASSERT_OK(stats.status());
  EXPECT_EQ(stats->at("allocated_bytes.all.current"), 1 << 20);
  EXPECT_THAT(memory::MemoryReserved(client()), IsOkAndHolds(::testing::Gt(0)));
  absl::StatusOr<std::string> summary = memory::MemorySummary(client());
  ASSERT_OK(summary.status());
  EXPECT_THAT(*summary, HasSubstr("device ID 1"));
  on_one.reset();  // freed
  ASSERT_OK(memory::ResetPeakMemoryStats(client()));
  EXPECT_THAT(memory::MaxMemoryAllocated(client()), IsOkAndHolds(0));
  ASSERT_OK(client().SetDevice(DeviceIndex(0)));
}

TEST_F(TorchCudaFunctionsTest, DeviceOfMakesABuffersDeviceCurrent) {
  absl::StatusOr<DeviceBuffer> on_one = memory::Allocate(client(), 4096, DeviceIndex(1));
  ASSERT_OK(on_one);
  EXPECT_EQ(client().CurrentDevice(), DeviceIndex(0));
  {
    DeviceOf guard(client(), *on_one);
    EXPECT_EQ(client().CurrentDevice(), DeviceIndex(1));
    {
      DeviceOf nothing(client(), DeviceBuffer());  // a CPU tensor: no change
      EXPECT_EQ(client().CurrentDevice(), DeviceIndex(1));
    }
    EXPECT_EQ(client().CurrentDevice(), DeviceIndex(1));
  }
  EXPECT_EQ(client().CurrentDevice(), DeviceIndex(0));
}

TEST_F(DaemonSegmentsTest, IpcCollectUnmapsWhatNoBufferUses) {
  absl::StatusOr<DeviceBuffer> kept = memory::Allocate(client(), 4096, DeviceIndex(0));
  ASSERT_OK(kept);
  absl::StatusOr<DeviceBuffer> dropped = memory::Allocate(client(), 4096, DeviceIndex(1));
  ASSERT_OK(dropped);
  EXPECT_EQ(gpumux::MappedSegmentCountForTest(client()), 2u);
  absl::StatusOr<CollectedMappings> nothing = memory::IpcCollect(client());
  ASSERT_OK(nothing);
  EXPECT_EQ(nothing->mappings, 0u);

  *dropped = DeviceBuffer();
  absl::StatusOr<CollectedMappings> collected = memory::IpcCollect(client());
  ASSERT_OK(collected);
  EXPECT_EQ(collected->mappings, 1u);
  EXPECT_EQ(collected->bytes, kSmallSegment);
  EXPECT_EQ(gpumux::MappedSegmentCountForTest(client()), 1u);
  // Still cached by the allocator: the next allocation there maps it again.
  EXPECT_THAT(memory::MemoryReserved(client(), DeviceIndex(1)),
              IsOkAndHolds(int64_t{kSmallSegment}));
  absl::StatusOr<DeviceBuffer> again = memory::Allocate(client(), 4096, DeviceIndex(1));
  ASSERT_OK(again);
  ASSERT_NE(again->data(), nullptr);
  std::memset(again->data(), 0x5a, 4096);
  EXPECT_EQ(static_cast<unsigned char*>(again->data())[4095], 0x5a);
  EXPECT_EQ(gpumux::MappedSegmentCountForTest(client()), 2u);
  std::memset(kept->data(), 1, 4096);  // the kept buffer's mapping was never touched
}

TEST_F(TorchCudaFunctionsTest, IpcCollectUnmapsAFreedImport) {
  absl::StatusOr<DeviceBuffer> shared =
      memory::Allocate(client(), 4096, DeviceIndex(0), {.shareable = true});
  ASSERT_OK(shared);
  std::memset(shared->data(), 7, 4096);
  absl::StatusOr<std::string> token = memory::Share(client(), *shared);
  ASSERT_OK(token);
  std::unique_ptr<Client> importer = ConnectAnother();
  ASSERT_NE(importer, nullptr);
  absl::StatusOr<DeviceBuffer> imported = memory::Import(*importer, *token);
  ASSERT_OK(imported);
  EXPECT_EQ(static_cast<unsigned char*>(imported->data())[0], 7);
  EXPECT_EQ(gpumux::MappedSegmentCountForTest(*importer), 1u);
  *imported = DeviceBuffer();
  absl::StatusOr<CollectedMappings> collected = memory::IpcCollect(*importer);
  ASSERT_OK(collected);
  EXPECT_EQ(collected->mappings, 1u);
  EXPECT_EQ(gpumux::MappedSegmentCountForTest(*importer), 0u);
  // The owner's buffer is untouched.
  EXPECT_EQ(static_cast<unsigned char*>(shared->data())[4095], 7);
}

TEST_F(TorchCudaFunctionsTest, CurrentBlasHandleNeedsACudaDaemon) {
  EXPECT_THAT(client().CurrentBlasHandle(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("needs a CUDA daemon")));
}

TEST_F(TorchCudaFunctionsTest, ResetMaxMemoryAllocatedResetsThePeaks) {
  {
    absl::StatusOr<DeviceBuffer> big =
        memory::Allocate(client(), uint64_t{4} << 20, DeviceIndex(0));
    ASSERT_OK(big);
  }
  ASSERT_OK(memory::FlushFrees(client()));
  EXPECT_THAT(memory::MaxMemoryAllocated(client()), IsOkAndHolds(int64_t{4} << 20));
  ASSERT_OK(memory::ResetMaxMemoryAllocated(client()));
  EXPECT_THAT(memory::MaxMemoryAllocated(client()), IsOkAndHolds(0));
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
TEST_F(TorchCudaFunctionsTest, DeprecatedCachedNamesAreTheReservedFigures) {
  absl::StatusOr<DeviceBuffer> buffer = memory::Allocate(client(), 4096, DeviceIndex(0));
  ASSERT_OK(buffer);
  EXPECT_THAT(memory::MemoryCached(client()), IsOkAndHolds(int64_t{kSmallSegment}));
  EXPECT_THAT(memory::MaxMemoryCached(client()), IsOkAndHolds(int64_t{kSmallSegment}));
  *buffer = DeviceBuffer();
  ASSERT_OK(memory::EmptyCache(client()));
  EXPECT_THAT(memory::MemoryCached(client()), IsOkAndHolds(0));
  ASSERT_OK(memory::ResetMaxMemoryCached(client()));
  EXPECT_THAT(memory::MaxMemoryCached(client()), IsOkAndHolds(0));
  EXPECT_THAT(memory::MaxMemoryReserved(client()), IsOkAndHolds(0));
}
#pragma GCC diagnostic pop

}  // namespace
}  // namespace gpumux::testing
