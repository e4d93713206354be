// NcclLibrary (server/backend/cuda/nccl_library.h): NCCL loaded at run time,
// its version read, a library that is not NCCL refused, and NCCL's results
// translated to the codes the daemon reports. Needs no GPU: loading NCCL
// and asking its version touch no device. Skipped where the build found
// nccl.h without the library.

#include "server/backend/cuda/nccl_library.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpumux {
namespace {

using ::testing::HasSubstr;

constexpr const char* kNccl = GPUMUX_NCCL_TEST_LIBRARY;

TEST(NcclLibraryTest, LoadsNcclAndReadsItsVersion) {
  if (std::string(kNccl).empty()) GTEST_SKIP() << "no libnccl next to nccl.h";
  absl::StatusOr<std::unique_ptr<NcclLibrary>> lib = NcclLibrary::Load(kNccl);
  ASSERT_TRUE(lib.ok()) << lib.status();
  // The library the header came with: the same major and minor.
  EXPECT_EQ((*lib)->version().rfind(absl::StrCat(NCCL_MAJOR, ".", NCCL_MINOR, "."), 0), 0u)
      << (*lib)->version();
  EXPECT_EQ((*lib)->path(), kNccl);
  int version = 0;
  EXPECT_EQ((*lib)->GetVersion(&version), ncclSuccess);
  EXPECT_EQ(version, NCCL_VERSION_CODE);
}

TEST(NcclLibraryTest, AMissingOrForeignLibraryIsRefusedSayingWhy) {
  absl::StatusOr<std::unique_ptr<NcclLibrary>> missing =
      NcclLibrary::Load("/nonexistent/libnccl.so.2");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(),
              HasSubstr("cannot load NCCL (/nonexistent/libnccl.so.2)"));
  // A real shared library that is not NCCL.
  absl::StatusOr<std::unique_ptr<NcclLibrary>> foreign = NcclLibrary::Load("libz.so.1");
  EXPECT_EQ(foreign.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(foreign.status().message(),
              HasSubstr("NCCL at libz.so.1 lacks ncclGetErrorString: not a usable libnccl"));
}

TEST(NcclLibraryTest, ResultsBecomeStatusesByKind) {
  if (std::string(kNccl).empty()) GTEST_SKIP() << "no libnccl next to nccl.h";
  absl::StatusOr<std::unique_ptr<NcclLibrary>> lib = NcclLibrary::Load(kNccl);
  ASSERT_TRUE(lib.ok()) << lib.status();
  const NcclLibrary& nccl = **lib;
  EXPECT_TRUE(nccl.Check(ncclSuccess, nullptr, "x").ok());
  const absl::Status invalid = nccl.Check(ncclInvalidArgument, nullptr, "ncclAllReduce");
  EXPECT_EQ(invalid.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(invalid.message(), HasSubstr("ncclAllReduce: "));
  EXPECT_EQ(nccl.Check(ncclInvalidUsage, nullptr, "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(nccl.Check(ncclUnhandledCudaError, nullptr, "x").code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(nccl.Check(ncclSystemError, nullptr, "x").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(nccl.Check(ncclRemoteError, nullptr, "x").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(nccl.Check(ncclInternalError, nullptr, "x").code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace gpumux
