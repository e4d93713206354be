#include "server/core/client_queries.h"

#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/core/notice_sink.h"
#include "server/core/session_registry.h"
#include "tests/status_matchers.h"

namespace gpumux {
namespace {

// Remembers the release question it was asked, and answers nothing itself.
class AskedSink final : public NoticeSink {
 public:
  void SegmentReleased(DeviceIndex, SegmentId, uint64_t, uint64_t) override {}
  void AskReleaseCached(uint64_t request, DeviceIndex) override {
    absl::MutexLock lock(&mu_);
    request_ = request;
  }
  void AskLeaseBlocks(uint64_t) override {}
  void StartProfiling(uint64_t, uint64_t) override {}
  void StopProfiling(uint64_t) override {}
  void Terminate(SessionEndReason, absl::string_view) override {}

  // Waits until asked; returns the question's request id.
  uint64_t AwaitQuestion() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](uint64_t* request) { return *request != 0; }, &request_));
    return request_;
  }

 private:
  absl::Mutex mu_;
  uint64_t request_ ABSL_GUARDED_BY(mu_) = 0;
};

// Many questions waiting at once: each asker waits on its own entry while
// the others register theirs. gpumuxd read a waiting entry after another
// asker's insertion had moved it (a heap-use-after-free AddressSanitizer
// reported on the pressure path of Memory.Lease).
TEST(ClientQueriesTest, ManyQuestionsWaitAtOnce) {
  constexpr int kAskers = 48;
  SessionRegistry registry;
  ClientQueries queries(&registry);
  std::vector<std::shared_ptr<AskedSink>> sinks;
  std::vector<SessionId> sessions;
  for (int i = 0; i < kAskers; ++i) {
    sinks.push_back(std::make_shared<AskedSink>());
    absl::StatusOr<OpenedSession> opened =
        registry.Open(SessionRecord{.client_name = "holder"}, sinks.back());
    ASSERT_OK(opened);
    sessions.push_back(opened->info.id);
  }
  std::vector<size_t> answered(kAskers, 0);
  std::vector<std::thread> askers;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  for (int i = 0; i < kAskers; ++i) {
    askers.emplace_back(
        [&, i] { answered[i] = queries.ReleaseCached({sessions[i]}, DeviceIndex(0), deadline); });
  }
  // Every asker waits before any answer comes.
  std::vector<uint64_t> requests;
  for (const auto& sink : sinks) requests.push_back(sink->AwaitQuestion());
  for (int i = 0; i < kAskers; ++i) queries.OnCacheReleased(sessions[i], requests[i]);
  for (std::thread& asker : askers) asker.join();
  for (int i = 0; i < kAskers; ++i) EXPECT_EQ(answered[i], 1u) << "asker " << i;
  EXPECT_LT(absl::Now(), deadline);
}

}  // namespace
}  // namespace gpumux
