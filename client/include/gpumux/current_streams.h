#pragma once

// CurrentStreams: one Client's per-thread current device and current stream
// of each device, as PyTorch keeps them per thread (torch.cuda.current_device,
// torch.cuda.current_stream). A thread starts on device 0 with every device's
// default stream current. The state lives in thread-local storage keyed by a
// process-unique number, so a later Client at the same address never sees it.
// Each thread reads and writes only its own state: no locking.

#include <cstdint>

#include "gpumux/common/ids.h"

namespace gpumux {

class CurrentStreams {
 public:
  // A stream as remembered here: id 0 is the device's default stream.
  struct Entry {
    StreamId id;
    int priority = 0;
  };

  CurrentStreams();
  // Forgets the destroying thread's state; other threads' states (a few
  // bytes each) go when those threads exit.
  ~CurrentStreams();
  CurrentStreams(const CurrentStreams&) = delete;
  CurrentStreams& operator=(const CurrentStreams&) = delete;

  DeviceIndex device() const;
  void set_device(DeviceIndex device);
  Entry stream(DeviceIndex device) const;
  void set_stream(DeviceIndex device, Entry entry);

 private:
  const uint64_t key_;
};

}  // namespace gpumux
