#pragma once

// The calling process's own CUDA work, for Client::Synchronize
// (torch.cuda.synchronize waits for all of a process's work on the device).
// Built from cuda_client.cc (CUDA builds) or cuda_client_unavailable.cc.

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gpumux {

// Waits for everything this process queued on the CUDA device with
// `pci_bus_id` (cudaDeviceSynchronize). OK at once where there is nothing of
// its own to wait for: an empty bus id (a host backend device), a build
// without CUDA, a device this process cannot see, or one on which it has no
// CUDA context yet (it is not created for this). The CUDA error otherwise.
absl::Status SynchronizeOwnCudaWork(absl::string_view pci_bus_id);

}  // namespace gpumux
