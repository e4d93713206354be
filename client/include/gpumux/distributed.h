#pragma once

// torch.distributed over groups of daemons: daemons on several nodes form a
// named group, and a Client on each node runs collectives on its own memory
// under the group's name (types in gpumux/group_types.h).

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gpumux/client.h"
#include "gpumux/comm_types.h"
#include "gpumux/common/reduce_op.h"
#include "gpumux/group_types.h"

namespace gpumux {
namespace distributed {

// Daemons on several nodes form a named group; a client on each node then
// runs collectives on its own memory under the group's name, every member
// the same ones in the same order (torch.distributed's rule). Groups
// outlive the sessions that use them. Each collective returns once the
// result is in the tensor (the work queued before it on the tensor's
// stream ran first). A member daemon that died or cannot be reached fails
// it with UNAVAILABLE naming the peer, within the group's timeout; the
// group is then broken (FAILED_PRECONDITION) until formed again.
//
// Joins this client's daemon to a group and waits until every rank
// joined and connected; forming a group of the same name again replaces
// it.
absl::StatusOr<DaemonGroupInfo> FormGroup(Client& client, const FormGroupOptions& options);
// Closes the daemon's group `name` (NOT_FOUND for none).
absl::Status DestroyGroup(Client& client, absl::string_view name);
// The groups the daemon is in, by name.
absl::StatusOr<std::vector<DaemonGroupInfo>> ListGroups(Client& client);
// dist.all_reduce(tensor, op): in place on every member.
absl::StatusOr<CollectiveResult> AllReduce(Client& client, absl::string_view group,
                                           const TensorRef& tensor, ReduceOp op = ReduceOp::kSum,
                                           const CollectiveOptions& options = {});
// dist.broadcast(tensor, src=root): every member's tensor gets root's.
absl::StatusOr<CollectiveResult> Broadcast(Client& client, absl::string_view group,
                                           const TensorRef& tensor, int root,
                                           const CollectiveOptions& options = {});
// dist.all_gather_into_tensor(output, input): `output` holds world_size
// times `input`'s elements, every rank's input in rank order.
absl::StatusOr<CollectiveResult> AllGatherIntoTensor(Client& client, absl::string_view group,
                                                     const TensorRef& input,
                                                     const TensorRef& output,
                                                     const CollectiveOptions& options = {});
// dist.reduce_scatter_tensor(output, input, op): `output` gets this rank's
// chunk of op over every rank's `input` (world_size times its elements).
absl::StatusOr<CollectiveResult> ReduceScatterTensor(Client& client, absl::string_view group,
                                                     const TensorRef& input,
                                                     const TensorRef& output,
                                                     ReduceOp op = ReduceOp::kSum,
                                                     const CollectiveOptions& options = {});

}  // namespace distributed
}  // namespace gpumux
