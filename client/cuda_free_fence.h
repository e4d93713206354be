#pragma once

// Free fences: how a freed DeviceBuffer on a CUDA device waits for the
// caller's own kernels. Built from cuda_client.cc (CUDA builds) or
// cuda_client_unavailable.cc.

#include <string>

namespace gpumux {

// Records an interprocess event on the calling thread's current CUDA stream
// (cuda_interop.h: CurrentCudaStream) for CUDA device `cuda_device`, and
// returns its 64-byte handle for the daemon to wait on before it reuses a
// block it allocated (daemon mode, shareable allocations; a block of the
// client's own allocator needs none). Each free records an event of its
// own, from a pool: one is reused once its record completed. When the
// record fails (say, the current stream is on another device) it
// synchronizes the device instead, logs, and returns "" (nothing left to
// wait for). Without CUDA support: "".
std::string RecordFreeFence(int cuda_device);

// Waits until every fence recorded so far completed. A client ending its
// session calls it first: the daemon drops a closed session's fences
// unqueried (they stand for a process that may be gone), so the work they
// stand for must be done before. No-op without CUDA support or fences.
void WaitForFreeFences();

}  // namespace gpumux
