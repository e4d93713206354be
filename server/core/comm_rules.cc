#include "server/core/comm_rules.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/request_limits.h"
#include "common/base/status_macros.h"

namespace gpumux {
namespace {

constexpr uint64_t kMaxTensorBytes = uint64_t{1} << 62;

}  // namespace

absl::StatusOr<uint64_t> CommTensorBytes(const CommTensor& tensor) {
  if (tensor.shape.size() > kMaxTensorDims) {
    return absl::InvalidArgumentError(absl::StrCat("a tensor has at most ", kMaxTensorDims,
                                                   " dimensions, not ", tensor.shape.size()));
  }
  uint64_t count = 1;
  for (int64_t size : tensor.shape) {
    if (size < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Trying to create tensor with negative dimension ", size, ": ",
                       FormatShape(tensor.shape)));
    }
  }
  for (int64_t size : tensor.shape) {
    const auto n = static_cast<uint64_t>(size);
    if (n != 0 && count > kMaxTensorBytes / n)
      count = kMaxTensorBytes + 1;
    else
      count *= n;
  }
  const uint64_t element = RngElementSize(tensor.dtype);
  if (count > kMaxTensorBytes / element) {
    return absl::InvalidArgumentError(
        absl::StrCat("a tensor of shape ", FormatShape(tensor.shape), " has more than 2^62 bytes"));
  }
  return count * element;
}

absl::StatusOr<DeviceIndex> CommTensorDevice(const MemoryManager& memory, SessionId session,
                                             const CommTensor& tensor) {
  GPUMUX_ASSIGN_OR_RETURN(const uint64_t bytes, CommTensorBytes(tensor));
  if (tensor.id.value() == 0 && bytes == 0) {
    GPUMUX_RETURN_IF_ERROR(memory.CheckDevice(tensor.device));
    return tensor.device;
  }
  GPUMUX_ASSIGN_OR_RETURN(AllocationView view, memory.Lookup(session, tensor.id));
  if (tensor.offset > view.requested_size || bytes > view.requested_size - tensor.offset) {
    return absl::OutOfRangeError(absl::StrCat("a tensor of shape ", FormatShape(tensor.shape), " (",
                                              bytes, " bytes) at offset ", tensor.offset,
                                              " does not fit allocation ", tensor.id.value(),
                                              " of ", view.requested_size, " bytes"));
  }
  // A tensor with memory is where its memory is: `device` is for tensors
  // without elements (0, the proto's default, reads as unset).
  if (tensor.device.value() != 0 && tensor.device != view.device) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a tensor of allocation ", tensor.id.value(), " is on its memory's device ",
        view.device.value(), ", not on the device ", tensor.device.value(), " it names"));
  }
  return view.device;
}

absl::Status CheckTensorCount(size_t count) {
  if (count <= kMaxCommTensorsPerRequest) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "a collective names at most ", kMaxCommTensorsPerRequest, " tensors, not ", count));
}

absl::Status CheckDeviceCount(size_t count) {
  if (count <= kMaxCommDevicesPerRequest) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "a collective names at most ", kMaxCommDevicesPerRequest, " devices, not ", count));
}

absl::Status CheckNonNegative(int64_t device) {
  if (device >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("Expected non-negative device index, but got ", device));
}

absl::StatusOr<DeviceIndex> CheckedDevice(int64_t device, int count) {
  GPUMUX_RETURN_IF_ERROR(CheckNonNegative(device));
  if (device >= count) {
    // Past int32 too: the message names the index as given.
    return absl::InvalidArgumentError(absl::StrCat("device ", device,
                                                   " is out of range: this daemon has ", count,
                                                   count == 1 ? " device (0)" : " devices (0..",
                                                   count == 1 ? "" : absl::StrCat(count - 1, ")")));
  }
  return DeviceIndex(static_cast<int32_t>(device));
}

absl::Status CheckHasDims(const Shape& shape, absl::string_view message) {
  if (!shape.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(message);
}

const char* TorchDtypeName(RngDtype dtype) {
  switch (dtype) {
    case RngDtype::kF32:
      return "torch.float32";
    case RngDtype::kF64:
      return "torch.float64";
    case RngDtype::kF16:
      return "torch.float16";
    case RngDtype::kBF16:
      return "torch.bfloat16";
    case RngDtype::kI32:
      return "torch.int32";
    case RngDtype::kI64:
      return "torch.int64";
    case RngDtype::kU8:
      return "torch.uint8";
  }
  return "unknown";
}

std::string PythonList(const std::optional<std::vector<int64_t>>& values) {
  if (!values.has_value()) return "None";
  return absl::StrCat("[", absl::StrJoin(*values, ", "), "]");
}

std::string JoinedSizes(const Shape& shape) { return absl::StrJoin(shape, "x"); }

}  // namespace gpumux
