#pragma once

// GroupTransport over Gloo's TCP transport (Debian's libgloo, CPU memory
// only): the members of a completed rendezvous round connect in a full mesh
// through the round's key-value space (Gloo's connectFullMesh), and the
// collectives run on host memory with Gloo's ring algorithms; reductions use
// common/tensor/reduce.h's steps, so every dtype reduces as PyTorch's kernels do.
// Gloo's connections are plaintext and unauthenticated, as with
// torch.distributed's gloo backend: run groups on a trusted network.

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/core/group_registry.h"
#include "server/core/rendezvous_store.h"

namespace gloo::transport {
class Device;
}  // namespace gloo::transport

namespace gpumux {

class GlooTransports {
 public:
  // `host`: the address (name or IP) this daemon's Gloo connections listen
  // on and peers reach it at.
  explicit GlooTransports(std::string host) : host_(std::move(host)) {}
  ~GlooTransports();

  // GroupRegistry::Hooks::connect_transport. UNAVAILABLE when a peer cannot
  // be reached or the address cannot be bound, DEADLINE_EXCEEDED when the
  // mesh did not connect within the spec's timeout.
  absl::StatusOr<std::unique_ptr<GroupTransport>> Connect(RendezvousPoint& rendezvous,
                                                          const GroupSpec& spec,
                                                          uint64_t generation);

 private:
  const std::string host_;
  absl::Mutex mu_;
  // Made on first use: one listening socket and event loop for every group.
  std::shared_ptr<gloo::transport::Device> device_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpumux
