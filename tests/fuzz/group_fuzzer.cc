// libFuzzer target for gpumux.v1.Group: forming groups of any name, world
// size, rank, rendezvous address and timeout (the fixture's daemon has no
// TCP listener, so only groups of one form), and every group collective with
// tensors of any dtype, shape, offset and device over the fixture's
// allocations (1 on device 0, 2 on device 1, 1 MiB each), roots and ops,
// waited or queued (async_op).

#include "gpumux/v1/group.grpc.pb.h"
#include "tests/fuzz/fuzz_service.h"

namespace gpumux::fuzz {

using v1::Group;

const FuzzService& TargetService() {
  static const FuzzService service(
      Group::service_full_name(),
      {
          Unary<Group>(
              "FormGroup", &Group::Stub::FormGroup,
              {"name: \"g\" world_size: 1 rank: 0", "name: \"g\" world_size: 1 rank: 0 device: 1",
               "name: \"g.2\" world_size: 2 rank: 1 rendezvous_address: \"127.0.0.1:1\" "
               "timeout_ms: 100"}),
          Unary<Group>("DestroyGroup", &Group::Stub::DestroyGroup, {"name: \"g\""}),
          Unary<Group>("ListGroups", &Group::Stub::ListGroups, {""}),
          Unary<Group>("AllReduce", &Group::Stub::AllReduce,
                       {"group: \"g\" tensor { memory { allocation_id: 1 } dtype: DTYPE_FLOAT16 "
                        "shape: 33 } op: REDUCE_OP_AVG",
                        "group: \"g\" tensor { memory { allocation_id: 2 offset: 8 } dtype: "
                        "DTYPE_INT64 shape: 5 } op: REDUCE_OP_PRODUCT options { "
                        "completion_event: true }",
                        "group: \"g\" tensor { memory { allocation_id: 1 } dtype: DTYPE_FLOAT32 "
                        "shape: 64 } op: REDUCE_OP_SUM options { async_op: true }"}),
          Unary<Group>("Broadcast", &Group::Stub::Broadcast,
                       {"group: \"g\" tensor { memory { allocation_id: 1 } dtype: DTYPE_UINT8 "
                        "shape: 7 } root: 0",
                        "group: \"g\" tensor { memory { allocation_id: 3 offset: 4 } dtype: "
                        "DTYPE_INT32 shape: 9 } root: 0 options { async_op: true "
                        "completion_event: true }"}),
          Unary<Group>("AllGather", &Group::Stub::AllGather,
                       {"group: \"g\" input { memory { allocation_id: 1 } dtype: DTYPE_FLOAT32 "
                        "shape: 4 } output { memory { allocation_id: 1 offset: 64 } dtype: "
                        "DTYPE_FLOAT32 shape: 4 }"}),
          Unary<Group>("ReduceScatter", &Group::Stub::ReduceScatter,
                       {"group: \"g\" input { memory { allocation_id: 2 } dtype: DTYPE_BFLOAT16 "
                        "shape: 6 } output { memory { allocation_id: 2 offset: 32 } dtype: "
                        "DTYPE_BFLOAT16 shape: 6 } op: REDUCE_OP_MAX"}),
      });
  return service;
}

}  // namespace gpumux::fuzz
