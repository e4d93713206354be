#pragma once

// The one check (and message) for a device index against a daemon's devices.

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gpumux/common/ids.h"

namespace gpumux {

// INVALID_ARGUMENT naming the valid range when `device` is not in [0, count).
inline absl::Status CheckDeviceInRange(DeviceIndex device, int count) {
  if (device.value() >= 0 && device.value() < count) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("device ", device.value(),
                                                 " is out of range: this daemon has ", count,
                                                 count == 1 ? " device (0)" : " devices (0..",
                                                 count == 1 ? "" : absl::StrCat(count - 1, ")")));
}

}  // namespace gpumux
