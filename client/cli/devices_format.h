#pragma once

// `gpumux devices` output: the daemon's devices as a table (index, name,
// backend, total, free, capability, SMs) or a JSON list of
// DeviceProperties objects with byte counts as integers.

#include <string>
#include <vector>

#include "gpumux/device_properties.h"

namespace gpumux {

std::string FormatDevicesJson(const std::vector<DeviceProperties>& devices);
std::string FormatDevicesTable(const std::vector<DeviceProperties>& devices);

}  // namespace gpumux
