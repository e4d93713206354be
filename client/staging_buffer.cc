#include "client/staging_buffer.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gpumux {
namespace {

// How long a local wait sleeps before it checks that the session still lives.
constexpr std::chrono::milliseconds kLocalWaitSlice{50};

}  // namespace

absl::StatusOr<std::unique_ptr<StagingBuffer>> StagingBuffer::Map(const v1::StagingBuffer& proto,
                                                                  MemoryFileFetcher* memory_files) {
  if (proto.handle().kind() != v1::HANDLE_KIND_HOST_MEMFD) {
    return absl::InternalError(
        absl::StrCat("gpumuxd offered a staging buffer with a handle of kind ",
                     static_cast<int>(proto.handle().kind()),
                     "; only host shared memory (HANDLE_KIND_HOST_MEMFD) can be mapped"));
  }
  if (proto.size() < 2) {
    return absl::InternalError(
        absl::StrCat("gpumuxd offered a staging buffer of ", proto.size(), " bytes"));
  }
  absl::StatusOr<MemoryMapping> mapping = NoMemorySocketError();
  if (memory_files != nullptr) {
    absl::StatusOr<SealedMemory> memory = memory_files->Fetch(proto.handle().data(), proto.size());
    mapping = memory.ok() ? memory->Map() : absl::StatusOr<MemoryMapping>(memory.status());
  }
  if (!mapping.ok()) {
    return absl::Status(mapping.status().code(), absl::StrCat("cannot map the staging buffer: ",
                                                              mapping.status().message()));
  }
  return std::unique_ptr<StagingBuffer>(
      new StagingBuffer(*std::move(mapping), proto.pinned(), memory_files));
}

void StagingBuffer::Track(int slot, Event event, absl::string_view ipc_handle, bool cuda) {
  StagedWork work;
  work.event = std::move(event);
  work.local = OpenLocalEvent(ipc_handle, cuda, memory_files_);
  pending_[slot] = std::move(work);
}

bool StagingBuffer::WaitsLocally(int slot) const {
  return pending_[slot].has_value() && pending_[slot]->local != nullptr;
}

Event StagingBuffer::TakeEvent(int slot) { return std::move(pending_[slot]->event); }

absl::Status StagingBuffer::Wait(int slot, SessionCheck check) {
  std::optional<StagedWork>& work = pending_[slot];
  if (!work.has_value()) return absl::OkStatus();
  absl::Status status;
  if (work->local != nullptr) {
    while (status.ok()) {
      HostIpcRecordState state = work->local->Await(kLocalWaitSlice);
      if (state == HostIpcRecordState::kCompleted) break;
      if (state == HostIpcRecordState::kAbandoned) {
        // The daemon died before its copy ran: the bytes are not there.
        status = absl::UnavailableError("gpumuxd exited before a staged copy completed");
        break;
      }
      status = check();
    }
  } else {
    status = work->event.Synchronize();
  }
  // Forgotten even on failure: the only failures are a session that ended
  // (nothing is copied any more) or an event the daemon no longer knows,
  // which must not wedge every later staged copy. Destroys the completion
  // event (one RPC) unless it went to a caller.
  work.reset();
  return status;
}

absl::Status StagingBuffer::WaitAll(SessionCheck check) {
  for (int slot : {0, 1}) {
    if (absl::Status status = Wait(slot, check); !status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace gpumux
