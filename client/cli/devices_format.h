#pragma once

// `gpumux devices` output: the daemon's devices as a table (index, name,
// backend, total, free, capability, SMs) or a JSON list of
// DeviceProperties objects with byte counts as integers.

#include <string>

#include "gpumux/v1/device.pb.h"

namespace gpumux {

std::string FormatDevicesJson(const v1::ListDevicesResponse& devices);
std::string FormatDevicesTable(const v1::ListDevicesResponse& devices);

}  // namespace gpumux
