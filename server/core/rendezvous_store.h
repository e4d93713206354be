#pragma once

// The rendezvous of groups of daemons (proto/gpumux/v1/group.proto): rank 0's
// daemon keeps a RendezvousStore; every member, rank 0's included, forms a
// group through a RendezvousPoint, which is that store in rank 0's process
// and a gRPC client of it elsewhere (server/rpc/rendezvous_client.h).
//
// A group forms in rounds. Join adds a rank to the group's pending round and
// waits until all `world_size` ranks joined it; the round then completes with
// the next generation (1, 2, ... per name) and the members' addresses, and a
// new pending round begins for whoever joins later (forming the group again).
// Each completed round has its own key-value space, which Gloo's
// connectFullMesh exchanges the members' transport addresses through: Set
// writes a key once (a second write replaces it), Get waits until the key
// exists. The newest round's keys are kept until a newer round of the group
// completes. Bounded: kMaxGroups names, kMaxKeysPerRound keys of at most
// kMaxKeyBytes and kMaxValueBytes each. Thread-safe.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gpumux {

inline constexpr int kMaxGroupWorldSize = 1024;
inline constexpr size_t kMaxGroupNameLength = 128;
inline constexpr absl::Duration kDefaultGroupTimeout = absl::Seconds(30);
inline constexpr absl::Duration kMaxGroupTimeout = absl::Hours(1);

// INVALID_ARGUMENT unless `name` is 1 to kMaxGroupNameLength characters of
// [A-Za-z0-9._-].
absl::Status CheckGroupName(absl::string_view name);
// What a member joins a round under (RendezvousName): a group name, or
// "NAME@TENANT" for a tenant's group; INVALID_ARGUMENT otherwise.
absl::Status CheckRendezvousName(absl::string_view name);
// INVALID_ARGUMENT unless 1 <= world_size <= kMaxGroupWorldSize and
// 0 <= rank < world_size.
absl::Status CheckGroupRank(int64_t world_size, int64_t rank);
// The timeout a request gives in milliseconds: 0 is kDefaultGroupTimeout;
// INVALID_ARGUMENT when negative or past kMaxGroupTimeout.
absl::StatusOr<absl::Duration> GroupTimeout(int64_t timeout_ms);

struct GroupMemberInfo {
  int rank = 0;
  std::string address;
};

struct RendezvousRound {
  uint64_t generation = 0;
  std::vector<GroupMemberInfo> members;  // by rank
};

class RendezvousPoint {
 public:
  virtual ~RendezvousPoint() = default;
  // DEADLINE_EXCEEDED naming the missing ranks when the round did not fill
  // within `timeout` (the caller's rank leaves it again);
  // FAILED_PRECONDITION when the pending round has another world size.
  virtual absl::StatusOr<RendezvousRound> Join(absl::string_view group, int world_size, int rank,
                                               absl::string_view address,
                                               absl::Duration timeout) = 0;
  // FAILED_PRECONDITION when `generation` is not the group's newest round.
  virtual absl::Status Set(absl::string_view group, uint64_t generation, absl::string_view key,
                           absl::string_view value) = 0;
  // DEADLINE_EXCEEDED when the key was not set within `timeout`;
  // FAILED_PRECONDITION when `generation` is not (or no longer) the group's
  // newest round.
  virtual absl::StatusOr<std::string> Get(absl::string_view group, uint64_t generation,
                                          absl::string_view key, absl::Duration timeout) = 0;
};

class RendezvousStore final : public RendezvousPoint {
 public:
  static constexpr size_t kMaxGroups = 1024;
  static constexpr size_t kMaxKeyBytes = 256;
  static constexpr size_t kMaxValueBytes = size_t{1} << 20;
  // Gloo's full mesh writes two keys per rank.
  static constexpr size_t KeysPerRound(int world_size) { return 4 * world_size + 16; }

  ~RendezvousStore() override;

  absl::StatusOr<RendezvousRound> Join(absl::string_view group, int world_size, int rank,
                                       absl::string_view address, absl::Duration timeout) override;
  absl::Status Set(absl::string_view group, uint64_t generation, absl::string_view key,
                   absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view group, uint64_t generation,
                                  absl::string_view key, absl::Duration timeout) override;

  // Ends every wait with UNAVAILABLE and refuses further calls (shutdown).
  void Close();

 private:
  struct Round {
    int world_size = 0;
    std::map<int, std::string> joined;  // rank -> address
    uint64_t generation = 0;            // set when complete
  };
  struct Group {
    std::shared_ptr<Round> pending;
    uint64_t generation = 0;                             // of the newest completed round, 0: none
    int world_size = 0;                                  // of that round
    absl::flat_hash_map<std::string, std::string> keys;  // that round's
  };
  // The group's newest round if it is `generation`, else FAILED_PRECONDITION.
  absl::StatusOr<Group*> CurrentRound(absl::string_view group, uint64_t generation)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Group> groups_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gpumux
