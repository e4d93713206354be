#include "common/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

using ::gpumux::testing::StatusIs;
using ::testing::StartsWith;

// The translation is table work: it needs the CUDA runtime, not a device.
TEST(CudaStatusTest, SuccessIsOk) { EXPECT_OK(CudaStatus(cudaSuccess, "cudaMalloc")); }

TEST(CudaStatusTest, MessageNamesTheCallTheErrorAndItsText) {
  EXPECT_THAT(CudaStatus(cudaErrorMemoryAllocation, "cudaMalloc(2097152)"),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       absl::StrCat("cudaMalloc(2097152): cudaErrorMemoryAllocation (",
                                    cudaGetErrorString(cudaErrorMemoryAllocation), ")")));
}

TEST(CudaStatusTest, CodesFollowTheKindOfError) {
  EXPECT_THAT(CudaStatus(cudaErrorInvalidValue, "x"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(CudaStatus(cudaErrorInvalidDevice, "x"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(CudaStatus(cudaErrorInvalidResourceHandle, "x"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(CudaStatus(cudaErrorNotReady, "x"), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(CudaStatus(cudaErrorNoDevice, "x"), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(CudaStatus(cudaErrorInsufficientDriver, "x"),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(CudaStatus(cudaErrorIllegalAddress, "x"),
              StatusIs(absl::StatusCode::kUnavailable, StartsWith("x: cudaErrorIllegalAddress (")));
  EXPECT_THAT(CudaStatus(cudaErrorUnknown, "x"), StatusIs(absl::StatusCode::kInternal));
}

TEST(CudaStatusTest, OnlyContextLosingErrorsAreSticky) {
  EXPECT_TRUE(IsStickyCudaError(cudaErrorIllegalAddress));
  EXPECT_TRUE(IsStickyCudaError(cudaErrorLaunchFailure));
  EXPECT_TRUE(IsStickyCudaError(cudaErrorECCUncorrectable));
  EXPECT_FALSE(IsStickyCudaError(cudaErrorMemoryAllocation));
  EXPECT_FALSE(IsStickyCudaError(cudaErrorInvalidValue));
  EXPECT_FALSE(IsStickyCudaError(cudaSuccess));
}

TEST(CudaStatusTest, NotReadyIsOnlyCudaErrorNotReady) {
  EXPECT_TRUE(CudaNotReady(cudaErrorNotReady));
  EXPECT_FALSE(CudaNotReady(cudaSuccess));
  EXPECT_FALSE(CudaNotReady(cudaErrorInvalidValue));
}

}  // namespace
}  // namespace gpumux
