#pragma once

// CollectiveEngine: collectives across several devices of this process in one
// call, each device's part queued on its own stream (NCCL's single-process
// communicators, ncclCommInitAll). A backend that has one hands it out
// (DeviceBackend::collectives()); CommWork then runs torch.cuda.comm's
// broadcast, reduce_add and all_reduce on it as PyTorch does where NCCL is
// available, and with copies and reductions otherwise.
//
// Every call takes one part per device, devices distinct, each part's stream
// on its device; the parts' order is the communicator's rank order. All
// addresses must lie, with their bytes, inside live segments of their
// devices (INVALID_ARGUMENT otherwise); NOT_FOUND for an unknown stream.
// Zero elements queue nothing. The work only queues; a failure of the
// engine itself (the communicator) is UNAVAILABLE or INTERNAL, and the
// communicator is dropped and made again by the next call, so one failure
// does not stay with the device list. Thread-safe: calls on the same devices
// are issued one at a time, in the same order to every device.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/segments/segment_source.h"
#include "common/tensor/rng_fill.h"
#include "gpumux/common/ids.h"
#include "gpumux/common/reduce_op.h"

namespace gpumux {

struct CollectivePart {
  DeviceIndex device;
  BackendStream stream;  // on `device` (INVALID_ARGUMENT otherwise)
  uint64_t send = 0;     // this device's input
  uint64_t recv = 0;     // its output (may equal send: in place)
};

// One rank of a communicator across processes on one device of this one
// (a group of daemons on CUDA: ncclCommInitRank). Every call queues this
// rank's part on `stream` (on device()) and returns; the ranks must issue
// the same calls in the same order. After a failure of Wait the
// communicator is aborted and every call fails: the group is formed again.
class GroupCommunicator {
 public:
  virtual ~GroupCommunicator() = default;

  virtual DeviceIndex device() const = 0;
  // Whether a failure aborted it (every call fails from then on).
  virtual bool broken() const = 0;
  // recv = op over every rank's send, `count` elements of `dtype`.
  virtual absl::Status AllReduce(BackendStream stream, uint64_t send, uint64_t recv, uint64_t count,
                                 RngDtype dtype, ReduceOp op) = 0;
  // Every rank's recv = rank `root`'s send, `bytes` bytes.
  virtual absl::Status Broadcast(BackendStream stream, uint64_t send, uint64_t recv, uint64_t bytes,
                                 int root) = 0;
  // recv[r * bytes, (r + 1) * bytes) = rank r's send.
  virtual absl::Status AllGather(BackendStream stream, uint64_t send, uint64_t recv,
                                 uint64_t bytes) = 0;
  // recv (`count` elements) = op over every rank's chunk `rank` of send
  // (world_size * count elements).
  virtual absl::Status ReduceScatter(BackendStream stream, uint64_t send, uint64_t recv,
                                     uint64_t count, RngDtype dtype, ReduceOp op) = 0;
  // Waits until the work queued on `stream` so far ran, watching the
  // communicator: UNAVAILABLE when it reports an error (a peer died or
  // cannot be reached), DEADLINE_EXCEEDED when `timeout` passed first (a
  // peer that does not take part); both abort the communicator, which ends
  // its kernels, so the stream goes on.
  virtual absl::Status Wait(BackendStream stream, absl::Duration timeout) = 0;
};

class CollectiveEngine {
 public:
  virtual ~CollectiveEngine() = default;

  // "nccl 2.28.9": the engine and its version, for logs and reports.
  virtual std::string description() const = 0;

  // Every part's recv = op over every part's send (ncclAllReduce); kAvg
  // divides as ncclAvg does.
  virtual absl::Status AllReduce(absl::Span<const CollectivePart> parts, ReduceOp op,
                                 RngDtype dtype, uint64_t count) = 0;
  // Every part's recv = parts[root].send (ncclBroadcast); `root` is an index
  // into `parts`.
  virtual absl::Status Broadcast(absl::Span<const CollectivePart> parts, size_t root,
                                 uint64_t bytes) = 0;
  // parts[root].recv = op over every part's send (ncclReduce); the other
  // parts' recv are not written.
  virtual absl::Status Reduce(absl::Span<const CollectivePart> parts, size_t root, ReduceOp op,
                              RngDtype dtype, uint64_t count) = 0;

  // Communicators made so far and those made again after a failure, for
  // stats and tests (the second job on a device list pays nothing).
  virtual uint64_t communicators_created() const = 0;

  // --- Across processes (groups of daemons). ---

  // A new communicator's id, made by rank 0 and handed to the others
  // (ncclGetUniqueId's bytes).
  virtual absl::StatusOr<std::string> NewGroupId() = 0;
  // Rank `rank` of `world_size` on `device`, every rank calling with rank
  // 0's id at about the same time. INVALID_ARGUMENT for a bad device, rank
  // or id; DEADLINE_EXCEEDED when the others did not join within `timeout`;
  // UNAVAILABLE when the communicator could not be made.
  virtual absl::StatusOr<std::unique_ptr<GroupCommunicator>> JoinGroup(DeviceIndex device,
                                                                       absl::string_view id,
                                                                       int world_size, int rank,
                                                                       absl::Duration timeout) = 0;
};

}  // namespace gpumux
