#pragma once

// GroupRegistry: the groups of daemons this daemon belongs to
// (proto/gpumux/v1/group.proto), by name. Forming one joins the rendezvous
// (rank 0's RendezvousStore, in this process for rank 0 and over gRPC for
// the others) and connects a GroupTransport (server/group: Gloo over TCP);
// Run then runs one collective at a time per group on host memory, and Queue
// queues one to run on the group's own thread, both in the order they were
// called (every member must see the same order). A
// collective that fails breaks its group: the error is checked against the
// peers (each member daemon is probed at its address), so that a dead or
// unreachable peer is named, with UNAVAILABLE, and its transport is closed at
// once, which ends the other members' waits on this one; every later
// collective of the group is FAILED_PRECONDITION until it is formed again.
//
// A group belongs to the tenant of the session that formed it: its name is
// one in that tenant's namespace (sessions opened without a tenant share
// one), on this daemon and at the rendezvous, so another tenant can neither
// find it nor join its rounds, and a tenant holds at most
// kMaxGroupsPerTenant. It ends when formed again, destroyed, when the
// session that formed it ends, or at Close(). Thread-safe.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/tensor/reduce.h"
#include "common/tensor/rng_fill.h"
#include "gpumux/common/ids.h"
#include "server/backend/collective_engine.h"
#include "server/core/rendezvous_store.h"

namespace gpumux {

// The members of one group, connected: collectives on host memory, one at a
// time (the registry serializes them). Errors: UNAVAILABLE when a peer
// closed its connection, DEADLINE_EXCEEDED when the group's timeout passed
// (the message the transport's own); the transport is unusable after one.
class GroupTransport {
 public:
  virtual ~GroupTransport() = default;
  // data[i] = op over every rank's data[i], for `count` elements of `dtype`
  // with common/tensor/reduce.h's steps (kAvg divides by the world size at the end).
  virtual absl::Status AllReduce(void* data, uint64_t count, RngDtype dtype, ReduceOp op) = 0;
  // Every rank's `bytes` at data get rank `root`'s.
  virtual absl::Status Broadcast(void* data, uint64_t bytes, int root) = 0;
  // output[r * bytes, (r + 1) * bytes) gets rank r's `bytes` at input.
  virtual absl::Status AllGather(const void* input, void* output, uint64_t bytes) = 0;
  // The group's communicator on device memory (NCCL on CUDA, see
  // server/core/group_device.h), for tensors on its device; null where the
  // members have none.
  virtual GroupCommunicator* device_communicator() { return nullptr; }
};

struct GroupSpec {
  std::string name;
  // The namespace of `name`: the forming session's tenant, "" for a session
  // opened without one.
  std::string tenant;
  // The session that formed it: the group ends with it.
  SessionId owner;
  int world_size = 1;
  int rank = 0;
  std::string rendezvous_address;
  absl::Duration timeout = kDefaultGroupTimeout;
  // The device whose tensors run on the group's device communicator where
  // every member has one (NCCL); tensors elsewhere go through host memory.
  DeviceIndex device;
};

// A group as a session names it: a name in its tenant's namespace.
struct GroupRef {
  absl::string_view tenant;  // "": sessions opened without a tenant
  absl::string_view name;
};

// What the members of a group meet under at the rendezvous, on every
// daemon: the name, with "@<tenant>" after it for a tenant's group (a group
// name has no '@').
std::string RendezvousName(GroupRef group);
// `group "NAME"`, with ` of tenant 'TENANT'` for a tenant's group: how
// messages name it.
std::string GroupLabel(GroupRef group);

struct GroupInfoView {
  GroupSpec spec;
  uint64_t generation = 0;
  std::vector<GroupMemberInfo> members;
  bool broken = false;
  std::string error;
  uint64_t collectives = 0;
  uint64_t bytes = 0;
  absl::Time formed_at;
  absl::Duration form_time;
  bool device_communicator = false;  // the members have one on spec.device
};

class GroupRegistry {
 public:
  struct Hooks {
    // A RendezvousPoint that reaches rank 0's daemon at `address`.
    std::function<absl::StatusOr<std::unique_ptr<RendezvousPoint>>(const std::string& address)>
        connect_rendezvous;
    // Connects the members of a completed round through `rendezvous`.
    std::function<absl::StatusOr<std::unique_ptr<GroupTransport>>(
        RendezvousPoint& rendezvous, const GroupSpec& spec, uint64_t generation)>
        connect_transport;
    // Whether the daemon at `address` answers within `timeout`.
    std::function<bool(const std::string& address, absl::Duration timeout)> probe;
    // The address this daemon advertises to its peers ("" for none).
    std::function<std::string()> own_address;
    // Whether the other daemons can reach `store` (rank 0 of a group of
    // more than one needs it).
    bool serves_rendezvous = false;
  };

  // `store` (rank 0's rendezvous, served to the others) must outlive this.
  GroupRegistry(RendezvousStore* store, Hooks hooks) : store_(store), hooks_(std::move(hooks)) {}
  ~GroupRegistry();

  // At most this many groups at once, and of one tenant (sessions without
  // a tenant count as one) a quarter of them.
  static constexpr size_t kMaxGroups = 256;
  static constexpr size_t kMaxGroupsPerTenant = kMaxGroups / 4;

  // Joins and connects; replaces a group of the same name (closed first).
  // INVALID_ARGUMENT for a bad name, rank or world size, or no rendezvous
  // address on a rank other than 0; FAILED_PRECONDITION for rank 0 of more
  // than one where the rendezvous is not served; RESOURCE_EXHAUSTED past
  // kMaxGroups or kMaxGroupsPerTenant; what the rendezvous and the
  // transport return otherwise (nothing is kept then).
  absl::StatusOr<GroupInfoView> Form(const GroupSpec& spec);
  // NOT_FOUND for a group this daemon is not in.
  absl::Status Destroy(GroupRef group);
  // Destroys the groups `session` formed (it ended).
  void SessionEnded(SessionId session);
  // Every group, by tenant and name.
  std::vector<GroupInfoView> List() const;

  // What a collective of a group runs with: its rank, world size, the
  // transport (a call that fails breaks the group) and a host staging
  // buffer kept between its collectives.
  class Member {
   public:
    int rank() const { return rank_; }
    int world_size() const { return world_size_; }
    absl::Status AllReduce(void* data, uint64_t count, RngDtype dtype, ReduceOp op) {
      return Note(transport_->AllReduce(data, count, dtype, op));
    }
    absl::Status Broadcast(void* data, uint64_t bytes, int root) {
      return Note(transport_->Broadcast(data, bytes, root));
    }
    absl::Status AllGather(const void* input, void* output, uint64_t bytes) {
      return Note(transport_->AllGather(input, output, bytes));
    }
    // The group's device communicator, or null; its calls' statuses go
    // through Device, so that one that broke it breaks the group.
    GroupCommunicator* device_communicator() const { return transport_->device_communicator(); }
    absl::Status Device(absl::Status status) {
      GroupCommunicator* comm = device_communicator();
      if (!status.ok() && comm != nullptr && comm->broken()) failed_ = true;
      return status;
    }
    // The group's timeout, for waits on the device communicator.
    absl::Duration timeout() const { return timeout_; }
    // At least `bytes` of host memory, valid until the collective returns.
    char* Staging(uint64_t bytes);
    // Fails the collective on this member's side in a way the peers cannot
    // recover from (it did not take part): the group breaks, as when a
    // transport call failed. Returns `status`.
    absl::Status Fail(absl::Status status) { return Note(std::move(status)); }

   private:
    friend class GroupRegistry;
    absl::Status Note(absl::Status status) {
      if (!status.ok()) failed_ = true;
      return status;
    }
    int rank_ = 0;
    int world_size_ = 1;
    absl::Duration timeout_;
    GroupTransport* transport_ = nullptr;
    std::vector<char>* staging_ = nullptr;
    bool failed_ = false;
  };
  // Runs `body` on group `name`, alone among the group's collectives;
  // `collective` names it in messages (e.g. "all_reduce"), `bytes` counts
  // toward the group's figures. NOT_FOUND for an unknown group,
  // FAILED_PRECONDITION for a broken one; otherwise `body`'s status, and
  // when a transport call failed the group breaks and the status names the
  // unreachable peers (see above).
  absl::Status Run(GroupRef group, absl::string_view collective, uint64_t bytes,
                   absl::FunctionRef<absl::Status(Member&)> body);
  // What a queued collective runs once its turn came, on the group's thread.
  using QueuedBody = absl::AnyInvocable<absl::Status(Member&) &&>;
  // Told how a queued collective ended, on the group's thread, before its
  // body is destroyed.
  using QueuedDone = absl::AnyInvocable<void(const absl::Status&) &&>;
  // Queues `body` to run as Run would, after every collective of the group
  // called before it (run or queued), on the group's own thread; returns at
  // once. NOT_FOUND and FAILED_PRECONDITION as Run's, checked now, and
  // whatever `check(rank, world_size)` returns (nothing is queued then, and
  // `done` is not called). Its later failure is Run's: logged, and where the
  // transport failed the group breaks, so that the next collective returns
  // why. A group formed again or destroyed first drops its queued bodies
  // unrun (FAILED_PRECONDITION to `done`, then destroyed); one that broke
  // first does the same as each comes to its turn. `done` gets every queued
  // collective's final status.
  absl::Status Queue(GroupRef group, absl::string_view collective, uint64_t bytes,
                     absl::FunctionRef<absl::Status(int rank, int world_size)> check,
                     QueuedBody body, QueuedDone done);
  // Closes every group (shutdown).
  void Close();

 private:
  struct Group;
  std::shared_ptr<Group> Find(GroupRef group) const;
  // Runs `body` on `group` now (the caller has the group's turn).
  absl::Status RunTurn(Group& group, absl::string_view collective, uint64_t bytes,
                       absl::FunctionRef<absl::Status(Member&)> body);
  // The group's thread: runs its queued collectives in their turns.
  void ServeQueue(Group& group);
  // A failed collective's status, with the unreachable peers named.
  absl::Status Diagnose(const Group& group, absl::string_view collective,
                        const absl::Status& failure) const;
  static GroupInfoView View(const Group& group);
  // RESOURCE_EXHAUSTED when spec's tenant holds kMaxGroupsPerTenant.
  absl::Status CheckTenantShareLocked(const GroupSpec& spec) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  RendezvousStore* store_;
  const Hooks hooks_;
  mutable absl::Mutex mu_;
  // By RendezvousName.
  absl::flat_hash_map<std::string, std::shared_ptr<Group>> groups_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gpumux
