#pragma once

// Trace replay through a running daemon (`gpumux replay --address`): a
// ReplayTarget over a Client, doing what a PyTorch program does. Allocate is
// memory::Allocate, Free drops the buffer (a batched free, like `del x`),
// Stats is this session's memory_stats. Not thread-safe.

#include <cstdint>
#include <map>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "gpumux/client.h"
#include "gpumux/device_buffer.h"
#include "gpumux/local_streams.h"
#include "replay/trace_replay.h"

namespace gpumux {

class ClientReplayTarget final : public ReplayTarget {
 public:
  // `client` must outlive this target. Allocations go to `device`.
  ClientReplayTarget(Client& client, DeviceIndex device);
  // Emulates a GPU running behind the CPU: before each free, work that
  // completes `lag` later is queued on the allocation's stream of `streams`
  // (the client's LocalStreams, which must outlive this target; the host
  // backend's, where a trace stream's id is its key).
  ClientReplayTarget(Client& client, DeviceIndex device, LocalStreams* streams, absl::Duration lag);

  // The handle is the allocation id. Trace streams are passed through: 0 is
  // the session's default stream; others must exist in the daemon (NOT_FOUND).
  absl::StatusOr<uint64_t> Allocate(uint64_t size, uint64_t stream) override;
  // NOT_FOUND for a handle this target did not hand out or already freed.
  absl::Status Free(uint64_t handle) override;
  // Flushes queued frees, then returns this session's memory_stats(device).
  absl::StatusOr<std::map<std::string, int64_t>> Stats() override;

 private:
  struct Live {
    DeviceBuffer buffer;
    uint64_t stream = 0;
  };

  Client& client_;
  const DeviceIndex device_;
  LocalStreams* const streams_ = nullptr;
  const absl::Duration lag_;
  absl::flat_hash_map<uint64_t, Live> live_;
};

}  // namespace gpumux
