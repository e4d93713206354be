#pragma once

// A group's device communicator (NCCL on CUDA): once a group's host
// transport connected, its members agree through the rendezvous round
// whether every one of them has a CollectiveEngine; if so rank 0 makes the
// communicator's id (ncclGetUniqueId), hands it to the others through the
// round, and every member joins on the group's device (ncclCommInitRank).
// Collectives on tensors on that device then run on it, queued on the
// tensor's stream, with no copy through host memory; the host transport
// stays for tensors elsewhere and for members without an engine. Keys of
// the round: "device-engine/<rank>" ("1" or "0") and "device-engine/id".

#include <memory>

#include "absl/status/statusor.h"
#include "server/backend/collective_engine.h"
#include "server/core/group_registry.h"
#include "server/core/rendezvous_store.h"

namespace gpumux {

// `host` with the device communicator added when every member has an engine
// (`engine` null: this member has none), else `host` as it is. The round's
// errors (DEADLINE_EXCEEDED when a member did not answer within the spec's
// timeout) and JoinGroup's come back as they are; `host` is dropped then.
absl::StatusOr<std::unique_ptr<GroupTransport>> AddDeviceCommunicator(
    std::unique_ptr<GroupTransport> host, CollectiveEngine* engine, RendezvousPoint& rendezvous,
    const GroupSpec& spec, uint64_t generation);

}  // namespace gpumux
