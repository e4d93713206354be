#pragma once

// PyTorch's argument rules for torch.cuda.comm, as CommWork and GroupWork
// check them: a tensor's byte size and device, the request limits, device
// indices, and the helpers that print dtypes, lists and sizes the way
// PyTorch's messages do (torch/nn/parallel/comm.py, torch/csrc/cuda/comm.cpp).
// Every failure is INVALID_ARGUMENT unless a function says otherwise.
// Functions without state; thread-safe.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tensor/rng_fill.h"
#include "common/tensor/tensor_chunks.h"
#include "gpumux/common/ids.h"
#include "server/core/comm_tensor.h"
#include "server/core/memory_manager.h"

namespace gpumux {

// A tensor's byte size. Fails for more than kMaxTensorDims dimensions, a
// negative one (PyTorch's "Trying to create tensor with negative dimension
// -1: [2, -1]"), or more than 2^62 bytes; a dimension of 0 makes any shape
// 0 bytes.
absl::StatusOr<uint64_t> CommTensorBytes(const CommTensor& tensor);
// The device of a tensor `session` names: CommTensorBytes's errors, NOT_FOUND
// for memory that is not the session's, OUT_OF_RANGE for a tensor that does
// not fit its allocation; a tensor without elements or memory is on its
// `device` (INVALID_ARGUMENT when out of range). A tensor with memory is on
// its allocation's device; naming another (non-zero) `device` fails.
absl::StatusOr<DeviceIndex> CommTensorDevice(const MemoryManager& memory, SessionId session,
                                             const CommTensor& tensor);

// At most kMaxCommTensorsPerRequest tensors in one call.
absl::Status CheckTensorCount(size_t count);
// At most kMaxCommDevicesPerRequest devices in one call.
absl::Status CheckDeviceCount(size_t count);
// PyTorch's "Expected non-negative device index, but got -1".
absl::Status CheckNonNegative(int64_t device);
// A device index from the caller: CheckNonNegative's error, or one that is
// not below `count` (the daemon's devices), named as given even past int32.
absl::StatusOr<DeviceIndex> CheckedDevice(int64_t device, int count);
// `message` for a 0-d tensor, which chunk and split_with_sizes refuse.
absl::Status CheckHasDims(const Shape& shape, absl::string_view message);

// "torch.float32", as PyTorch prints a dtype.
const char* TorchDtypeName(RngDtype dtype);
// "[0, 1]" or "None", as Python prints an optional list in comm.py's messages.
std::string PythonList(const std::optional<std::vector<int64_t>>& values);
// "2x3", as reduce_add joins sizes.
std::string JoinedSizes(const Shape& shape);

}  // namespace gpumux
