#pragma once

// The LocalStreams of a client on a CUDA daemon (CUDA builds of libgpumux):
// this process's real CUDA streams, named by their cudaStream_t's value,
// and events from cudaEventCreateWithFlags(cudaEventDisableTiming). Queries
// and waits run in relaxed capture mode, so they never disturb a graph
// another thread captures; a stream that captures is not queried at all
// (the allocator asks Capturing first).

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "gpumux/common/ids.h"
#include "gpumux/local_streams.h"

namespace gpumux {

// `pci_bus_id` names a daemon device's PCI bus id, by which this process
// finds its own CUDA ordinal of it. Null in builds without CUDA
// (cuda_client_unavailable.cc).
std::unique_ptr<LocalStreams> MakeCudaLocalStreams(
    std::function<absl::StatusOr<std::string>(DeviceIndex)> pci_bus_id);

// The calling thread's current CUDA stream (cuda_interop.h's
// CurrentCudaStream) as a LocalStream; the default stream without CUDA.
LocalStream CurrentCudaLocalStream();

}  // namespace gpumux
