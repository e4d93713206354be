#pragma once

// LocalEvent: one of the daemon's interprocess completion events opened in
// this process, so the client waits for the daemon's work without an RPC. A
// host backend handle's memory file is fetched from the memory socket and
// mapped (gpumux/common/host_ipc_event.h);
// a CUDA one is opened with cudaIpcOpenEventHandle (CUDA builds only).

#include <chrono>
#include <memory>

#include "absl/strings/string_view.h"
#include "common/ipc/memory_socket.h"
#include "gpumux/common/host_ipc_event.h"

namespace gpumux {

class LocalEvent {
 public:
  virtual ~LocalEvent() = default;
  // Waits up to `timeout` for the work the event stood for when it was
  // opened: kCompleted, kPending when the time ran out, or kAbandoned when
  // the recorder is gone without completing it (a daemon that died).
  virtual HostIpcRecordState Await(std::chrono::nanoseconds timeout) = 0;
};

// Opens `handle` (the daemon records the event before it answers, so what it
// captured then is what is waited for). `cuda`: the daemon's backend is
// CUDA; otherwise the event's file comes from `memory_files` (may be null).
// Null when this process cannot open it (a CUDA handle in a build without
// CUDA, one CUDA rejects, no memory socket); the caller then waits by RPC.
std::unique_ptr<LocalEvent> OpenLocalEvent(absl::string_view handle, bool cuda,
                                           MemoryFileFetcher* memory_files);

// The CUDA half of OpenLocalEvent: cuda_client.cc, or null from
// cuda_client_unavailable.cc.
std::unique_ptr<LocalEvent> OpenCudaLocalEvent(absl::string_view handle);

}  // namespace gpumux
