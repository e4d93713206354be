#pragma once

// RAII guards of a Client's per-thread current device and stream:
// StreamGuard is torch.cuda.stream(s), DeviceGuard is torch.cuda.device(d),
// DeviceOf is torch.cuda.device_of(x).
// Each restores on destruction exactly what it changed. A guard belongs to the
// thread that made it (the state it changes is that thread's) and must be
// destroyed there, in reverse order of creation, before its Client.

#include "gpumux/common/ids.h"
#include "gpumux/current_streams.h"
#include "gpumux/device_buffer.h"
#include "gpumux/stream.h"

namespace gpumux {

class StreamGuard {
 public:
  // Makes `stream` current on its device and its device current, as
  // torch.cuda.stream(stream) does.
  explicit StreamGuard(const Stream& stream);
  // Restores the previous current stream of `stream`'s device, that of the
  // previous device, and the previous device.
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Client& client_;
  const DeviceIndex previous_device_;
  const DeviceIndex stream_device_;
  const CurrentStreams::Entry previous_on_previous_device_;
  const CurrentStreams::Entry previous_on_stream_device_;
};

class DeviceGuard {
 public:
  // Makes `device` current; a negative device changes nothing, as
  // torch.cuda.device(-1). Unlike Client::SetDevice it does not check the
  // index: work on a device past the last fails with the daemon's
  // INVALID_ARGUMENT.
  DeviceGuard(Client& client, DeviceIndex device);
  // Restores the previous current device.
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  Client& client_;
  const DeviceIndex previous_device_;
};

class DeviceOf {
 public:
  // Makes `buffer`'s device current; an empty buffer changes nothing, as a
  // CPU tensor does in PyTorch.
  DeviceOf(Client& client, const DeviceBuffer& buffer);
  // Restores the previous current device.
  ~DeviceOf() = default;
  DeviceOf(const DeviceOf&) = delete;
  DeviceOf& operator=(const DeviceOf&) = delete;

 private:
  DeviceGuard guard_;
};

}  // namespace gpumux
