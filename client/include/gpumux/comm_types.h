#pragma once

// The collectives' types (torch.cuda.comm, gpumux/comm.h and nccl.h): tensors as
// they name memory, their results, and options; kept apart so that they can
// be default arguments there.

#include <cstdint>
#include <optional>
#include <vector>

#include "gpumux/common/ids.h"
#include "gpumux/device_buffer.h"
#include "gpumux/event.h"
#include "gpumux/random_options.h"
#include "gpumux/stream.h"

namespace gpumux {

// PyTorch's default buffer_size for the coalesced collectives (10 MiB).
inline constexpr uint64_t kDefaultCoalescedBufferSize = 10485760;

// A contiguous, row-major tensor: `shape` elements of `dtype` starting
// `offset` bytes into `buffer` (a DeviceBuffer of this Client). A tensor
// without elements may have no buffer; `device` then says where it is.
struct TensorRef {
  const DeviceBuffer* buffer = nullptr;
  uint64_t offset = 0;
  Dtype dtype = Dtype::kFloat32;
  std::vector<int64_t> shape;
  DeviceIndex device;  // only for a tensor without a buffer
};

// One tensor a collective returns: in memory the caller holds (an input or
// `out` tensor itself, or a view of one, as PyTorch returns them), or in a
// new allocation the result owns.
struct ResultTensor {
  DeviceBuffer owned;                      // the new allocation, if any
  const DeviceBuffer* borrowed = nullptr;  // else the caller's buffer (null without elements)
  uint64_t offset = 0;
  Dtype dtype = Dtype::kFloat32;
  std::vector<int64_t> shape;
  DeviceIndex device;

  // The buffer holding the tensor; null for one without elements.
  const DeviceBuffer* buffer() const { return owned.valid() ? &owned : borrowed; }
  // The tensor as an input of a later collective.
  TensorRef ref() const { return TensorRef{buffer(), offset, dtype, shape, device}; }
  // Bytes: elements times the dtype's size.
  uint64_t bytes() const;
};

struct CollectiveResult {
  // In the order each call gives.
  std::vector<ResultTensor> tensors;
  // The completion event, when options.completion_event asked for one.
  Event completion;
};

struct CollectiveOptions {
  // The stream of each device's part; a device not named runs on the
  // calling thread's current stream there, as PyTorch's comm does.
  std::vector<Stream> streams;
  // Return only once everything completed.
  bool wait = false;
  // An interprocess Event recorded after all of the work.
  bool completion_event = false;
  // Return once the work is queued, as torch.distributed's async_op=True:
  // what the within-node functions do unless `wait` (with which it is
  // INVALID_ARGUMENT). A group collective (distributed::AllReduce, ...)
  // otherwise returns once done; with it, it runs on the tensor's stream
  // after the work queued there before it and before the work queued after
  // it (Synchronize, or the completion event, says when it is done). Its
  // failure then breaks the group, and the group's next call returns why;
  // one still queued when its group is formed again or destroyed does not
  // run. On CUDA the call still waits.
  bool async_op = false;
};

}  // namespace gpumux
