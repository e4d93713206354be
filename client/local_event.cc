#include "client/local_event.h"

#include <utility>

namespace gpumux {
namespace {

class HostLocalEvent final : public LocalEvent {
 public:
  explicit HostLocalEvent(std::unique_ptr<HostIpcEvent> event)
      : event_(std::move(event)), generation_(event_->recorded()) {}
  HostIpcRecordState Await(std::chrono::nanoseconds timeout) override {
    return event_->Await(generation_, timeout);
  }

 private:
  std::unique_ptr<HostIpcEvent> event_;
  const uint64_t generation_;
};

}  // namespace

std::unique_ptr<LocalEvent> OpenLocalEvent(absl::string_view handle, bool cuda,
                                           MemoryFileFetcher* memory_files) {
  if (cuda) return OpenCudaLocalEvent(handle);
  if (memory_files == nullptr) return nullptr;
  absl::StatusOr<std::string> key = HostIpcEventKey(handle);
  if (!key.ok()) return nullptr;
  absl::StatusOr<SealedMemory> memory = memory_files->Fetch(*key, kHostIpcEventFileBytes);
  if (!memory.ok()) return nullptr;
  absl::StatusOr<std::unique_ptr<HostIpcEvent>> event =
      HostIpcEvent::Adopt(*std::move(memory), "gpumux-event");
  if (!event.ok()) return nullptr;
  return std::make_unique<HostLocalEvent>(*std::move(event));
}

}  // namespace gpumux
