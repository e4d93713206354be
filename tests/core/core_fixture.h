#pragma once

// The core's books wired as the daemon wires them, over a HostBackend of two
// 16 MiB devices and without transport, for tests of the core functions
// that join several books (DeviceWork, ListSessionOverviews).

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "server/backend/host/host_backend.h"
#include "server/backend/memory_file_table.h"
#include "server/core/device_work.h"
#include "server/core/memory_manager.h"
#include "server/core/notice_sink.h"
#include "server/core/nvtx_ranges.h"
#include "server/core/rng_generators.h"
#include "server/core/session_lifecycle.h"
#include "server/core/session_registry.h"
#include "server/core/staging_buffers.h"
#include "server/core/stream_manager.h"
#include "tests/status_matchers.h"

namespace gpumux::testing {

class CoreTest : public ::testing::Test {
 protected:
  static constexpr int kDevices = 2;

  void SetUp() override {
    HostBackend::Options options;
    options.device_count = kDevices;
    options.device_memory = uint64_t{16} << 20;
    options.memory_files = &memory_files_;
    absl::StatusOr<std::unique_ptr<HostBackend>> backend = HostBackend::Create(options);
    ASSERT_OK(backend);
    backend_ = *std::move(backend);
    streams_ = std::make_unique<StreamManager>(backend_.get());
    memory_ = std::make_unique<MemoryManager>(backend_.get(), AllocatorOptions{}, &sessions_,
                                              streams_.get());
    staging_ = std::make_unique<StagingBuffers>(backend_.get(), &memory_files_);
    rng_ = std::make_unique<RngGenerators>(kDevices);
    work_ = std::make_unique<DeviceWork>(backend_.get(), memory_.get(), streams_.get(),
                                         staging_.get(), rng_.get());
    lifecycle_ = std::make_unique<SessionLifecycle>(&sessions_, memory_.get(), streams_.get(),
                                                    staging_.get(), rng_.get(), &nvtx_);
  }
  void TearDown() override {
    for (SessionId session : opened_)
      lifecycle_->Close(session, SessionEndReason::kClosed, "test over");
  }

  // A session opened as the Session service opens one.
  SessionId Open(absl::string_view client_name) {
    SessionRecord info;
    info.client_name = std::string(client_name);
    info.pid = 1234;
    absl::StatusOr<OpenedSession> opened =
        lifecycle_->Open(std::move(info), std::make_shared<QuietSink>());
    EXPECT_OK(opened);
    if (!opened.ok()) return SessionId(0);
    opened_.push_back(opened->info.id);
    return opened->info.id;
  }

  AllocationId Allocate(SessionId session, DeviceIndex device, uint64_t size) {
    absl::StatusOr<AllocationView> view =
        memory_->Allocate(session, device, StreamId(0), size, false);
    EXPECT_OK(view);
    return view.ok() ? view->id : AllocationId(0);
  }

 private:
  class QuietSink final : public NoticeSink {
   public:
    void SegmentReleased(DeviceIndex, SegmentId, uint64_t, uint64_t) override {}
    void AskReleaseCached(uint64_t, DeviceIndex) override {}
    void AskLeaseBlocks(uint64_t) override {}
    void StartProfiling(uint64_t, uint64_t) override {}
    void StopProfiling(uint64_t) override {}
    void Terminate(SessionEndReason, absl::string_view) override {}
  };

 protected:
  // In the daemon's order, so they go in reverse.
  MemoryFileTable memory_files_;
  std::unique_ptr<HostBackend> backend_;
  SessionRegistry sessions_;
  std::unique_ptr<StreamManager> streams_;
  std::unique_ptr<MemoryManager> memory_;
  std::unique_ptr<StagingBuffers> staging_;
  std::unique_ptr<RngGenerators> rng_;
  NvtxRanges nvtx_;
  std::unique_ptr<DeviceWork> work_;
  std::unique_ptr<SessionLifecycle> lifecycle_;
  std::vector<SessionId> opened_;
};

}  // namespace gpumux::testing
