// libFuzzer target for gpumux.v1.Comm: every collective with tensors of any
// dtype, shape, offset and device over the fixture's allocations (1 on
// device 0, 2 on device 1, 1 MiB each), host and device destinations, any
// streams and reduce ops.

#include "gpumux/v1/comm.grpc.pb.h"
#include "tests/fuzz/fuzz_service.h"

namespace gpumux::fuzz {

using v1::Comm;

const FuzzService& TargetService() {
  static const FuzzService service(
      Comm::service_full_name(),
      {
          Unary<Comm>("Broadcast", &Comm::Stub::Broadcast,
                      {"tensor { memory { allocation_id: 1 } dtype: DTYPE_FLOAT32 shape: 16 } "
                       "devices { devices: 0 devices: 1 }",
                       "tensor { memory { allocation_id: 2 offset: 8 } dtype: DTYPE_FLOAT16 "
                       "shape: 4 shape: 3 } out { tensors { memory { allocation_id: 1 } dtype: "
                       "DTYPE_FLOAT16 shape: 4 shape: 3 } } options { wait: true }"}),
          Unary<Comm>("BroadcastCoalesced", &Comm::Stub::BroadcastCoalesced,
                      {"tensors { memory { allocation_id: 1 } dtype: DTYPE_INT64 shape: 2 } "
                       "tensors { memory { allocation_id: 1 offset: 64 } dtype: DTYPE_UINT8 "
                       "shape: 5 } devices: 0 devices: 1 buffer_size: 8"}),
          Unary<Comm>("ReduceAdd", &Comm::Stub::ReduceAdd,
                      {"inputs { memory { allocation_id: 1 } dtype: DTYPE_BFLOAT16 shape: 9 } "
                       "inputs { memory { allocation_id: 2 } dtype: DTYPE_BFLOAT16 shape: 9 } "
                       "destination: 1 options { completion_event: true }"}),
          Unary<Comm>("ReduceAddCoalesced", &Comm::Stub::ReduceAddCoalesced,
                      {"inputs { tensors { memory { allocation_id: 1 } dtype: DTYPE_INT32 "
                       "shape: 3 } } inputs { tensors { memory { allocation_id: 2 } dtype: "
                       "DTYPE_INT32 shape: 3 } } destination: 0 buffer_size: 10485760"}),
          Unary<Comm>("Scatter", &Comm::Stub::Scatter,
                      {"tensor { memory { allocation_id: 1 } dtype: DTYPE_FLOAT64 shape: 4 "
                       "shape: 7 } devices { devices: 1 devices: 0 } dim: -1",
                       "tensor { memory { allocation_id: 2 } dtype: DTYPE_FLOAT32 shape: 6 } "
                       "devices { devices: 0 devices: 1 } chunk_sizes { sizes: 2 sizes: 4 } "
                       "chunk_streams: 0 chunk_streams: 1"}),
          Unary<Comm>("Gather", &Comm::Stub::Gather,
                      {"tensors { memory { allocation_id: 1 } dtype: DTYPE_FLOAT32 shape: 2 "
                       "shape: 3 } tensors { memory { allocation_id: 2 } dtype: DTYPE_FLOAT32 "
                       "shape: 2 shape: 5 } dim: 1 device: 0",
                       "tensors { memory { allocation_id: 1 } dtype: DTYPE_UINT8 shape: 7 } "
                       "host_inline: true"}),
          Unary<Comm>("AllReduce", &Comm::Stub::AllReduce,
                      {"inputs { memory { allocation_id: 1 } dtype: DTYPE_FLOAT16 shape: 33 } "
                       "inputs { memory { allocation_id: 2 } dtype: DTYPE_FLOAT16 shape: 33 } "
                       "op: REDUCE_OP_AVG",
                       "inputs { memory { allocation_id: 1 } dtype: DTYPE_INT64 shape: 5 } "
                       "outputs { tensors { memory { allocation_id: 1 offset: 40 } dtype: "
                       "DTYPE_INT64 shape: 5 } } op: REDUCE_OP_PRODUCT"}),
      });
  return service;
}

}  // namespace gpumux::fuzz
