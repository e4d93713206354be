// PyTorch's out-of-memory text with the session's figures, and what it says
// when the backend cannot tell how much is free.

#include "allocator/oom_message.h"

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpumux {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr uint64_t kMiB = uint64_t{1} << 20;

OomReport Report() {
  OomReport r;
  r.device = 1;
  r.attempted_segment_size = 20 * kMiB;
  r.device_total = 64 * kMiB;
  r.device_free = uint64_t{2} * kMiB;
  r.device_allocated = 40 * kMiB;
  r.device_reserved = 50 * kMiB;
  r.client_allocated = 8 * kMiB;
  r.client_reserved = 10 * kMiB;
  return r;
}

TEST(OomMessageTest, PyTorchsWordsThenTheSessionsFigures) {
  const std::string message = FormatOomMessage(Report());
  EXPECT_THAT(
      message,
      StartsWith("CUDA out of memory. Tried to allocate 20.00 MiB. GPU 1 has a total capacity of "
                 "64.00 MiB of which 2.00 MiB is free. Of the allocated memory 40.00 MiB is "
                 "allocated by PyTorch, and 10.00 MiB is reserved by PyTorch but unallocated."));
  EXPECT_THAT(message,
              HasSubstr("This session has 8.00 MiB allocated and 10.00 MiB reserved on GPU 1."));
  EXPECT_THAT(message, HasSubstr("--allocator-conf=max_split_size_mb:"));
  EXPECT_THAT(message, ::testing::Not(HasSubstr("expandable_segments")));
}

TEST(OomMessageTest, AFreeFigureTheBackendCouldNotGiveIsSaidToBeUnknown) {
  OomReport r = Report();
  r.device_free =
      absl::UnavailableError("cudaMemGetInfo: an illegal memory access was encountered");
  EXPECT_THAT(FormatOomMessage(r), HasSubstr("64.00 MiB of which the free part is unknown "
                                             "(cudaMemGetInfo: an illegal memory access was "
                                             "encountered). Of the allocated memory"));
}

}  // namespace
}  // namespace gpumux
