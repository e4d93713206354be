#include "client/parallel_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"

namespace gpumux {
namespace {

constexpr size_t kParallelThreshold = size_t{4} << 20;
constexpr size_t kMaxThreads = 8;

// Helper threads that run slices; detached for the life of the process.
class CopyPool {
 public:
  static CopyPool& Get() {
    static CopyPool* pool = new CopyPool();
    return *pool;
  }
  // Threads available besides the caller's.
  size_t helpers() const { return helpers_; }

  void Run(std::function<void()> task) {
    absl::MutexLock lock(&mu_);
    tasks_.push_back(std::move(task));
  }

 private:
  CopyPool() {
    const size_t cores = std::max(1u, std::thread::hardware_concurrency());
    // Half the cores (the daemon and the caller's own threads need the rest),
    // at least two threads in all.
    helpers_ = std::min(kMaxThreads, std::max<size_t>(2, cores / 2)) - 1;
    for (size_t i = 0; i < helpers_; ++i) std::thread([this] { Loop(); }).detach();
  }
  void Loop() {
    for (;;) {
      std::function<void()> task;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](std::deque<std::function<void()>>* tasks) { return !tasks->empty(); }, &tasks_));
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  size_t helpers_ = 0;
  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

void ParallelMemcpy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;  // either pointer may be null then, which memcpy forbids
  CopyPool& pool = CopyPool::Get();
  if (bytes < kParallelThreshold || pool.helpers() == 0) {
    std::memcpy(dst, src, bytes);
    return;
  }
  const size_t parts = std::min(pool.helpers() + 1, bytes / (kParallelThreshold / 4));
  // Slices of whole 4 KiB pages, the last one taking the rest.
  const size_t slice = (bytes / parts + 4095) / 4096 * 4096;
  auto* to = static_cast<char*>(dst);
  const auto* from = static_cast<const char*>(src);
  absl::BlockingCounter done(static_cast<int>(parts - 1));
  for (size_t i = 1; i < parts; ++i) {
    const size_t begin = std::min(bytes, i * slice);
    const size_t end = i + 1 == parts ? bytes : std::min(bytes, begin + slice);
    pool.Run([to, from, begin, end, &done] {
      std::memcpy(to + begin, from + begin, end - begin);
      done.DecrementCount();
    });
  }
  std::memcpy(to, from, std::min(bytes, slice));
  done.Wait();
}

}  // namespace gpumux
