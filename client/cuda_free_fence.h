#pragma once

// Free fences: how a freed DeviceBuffer on a CUDA device waits for the
// caller's own kernels. Built from cuda_client.cc (CUDA builds) or
// cuda_client_unavailable.cc.

#include <functional>
#include <string>

namespace gpumux {

// Records an interprocess event on the calling thread's current CUDA stream
// (cuda_interop.h: CurrentCudaStream) for CUDA device `cuda_device`, and
// returns its 64-byte handle for a free to wait on. One event per stream is
// re-recorded each time: a later capture on the same stream completes only
// after the earlier one, so waiting on the latest is always safe. When the
// record fails (say, the current stream is on another device) it
// synchronizes the device instead, logs, and returns "" (nothing left to
// wait for). Without CUDA support: "".
std::string RecordFreeFence(int cuda_device);

// RecordFreeFence for a block of this process's own allocator (local
// allocation): the same record, answered by querying the fence's event here
// (an interprocess handle cannot be opened by the process that made it):
// true once the captured work completed. Null when there is nothing to wait
// for, as when RecordFreeFence returns "".
std::function<bool()> RecordLocalFreeFence(int cuda_device);

// Waits until every fence recorded so far completed. A client ending its
// session calls it first: the daemon drops a closed session's fences
// unqueried (they stand for a process that may be gone), so the work they
// stand for must be done before. No-op without CUDA support or fences.
void WaitForFreeFences();

}  // namespace gpumux
