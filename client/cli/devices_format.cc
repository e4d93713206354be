#include "client/cli/devices_format.h"

#include "absl/strings/str_cat.h"
#include "client/cli/text_table.h"
#include "common/base/byte_size.h"
#include "common/formats/json_writer.h"

namespace gpumux {

std::string FormatDevicesJson(const std::vector<DeviceProperties>& devices) {
  JsonWriter json;
  json.BeginArray();
  for (const DeviceProperties& device : devices) {
    json.BeginObject();
    json.Key("index");
    json.Int(device.index);
    json.Key("name");
    json.String(device.name);
    json.Key("backend");
    json.String(device.backend);
    json.Key("total_memory");
    json.Uint(device.total_memory);
    json.Key("free_memory");
    json.Uint(device.free_memory);
    json.Key("major");
    json.Int(device.major);
    json.Key("minor");
    json.Int(device.minor);
    json.Key("multi_processor_count");
    json.Int(device.multi_processor_count);
    json.Key("pci_bus_id");
    json.String(device.pci_bus_id);
    json.Key("arch_list");
    json.BeginArray();
    for (const std::string& arch : device.arch_list) json.String(arch);
    json.EndArray();
    json.Key("gencode_flags");
    json.String(device.gencode_flags);
    json.Key("driver_version");
    json.Int(device.driver_version);
    json.Key("runtime_version");
    json.Int(device.runtime_version);
    json.Key("collectives");
    json.String(device.collectives);
    json.Key("healthy");
    json.Bool(device.healthy);
    json.Key("health");
    json.String(device.health);
    json.EndObject();
  }
  json.EndArray();
  return absl::StrCat(json.str(), "\n");
}

std::string FormatDevicesTable(const std::vector<DeviceProperties>& devices) {
  TextTable table(
      {"INDEX", "NAME", "BACKEND", "TOTAL", "FREE", "CAPABILITY", "SMS", "PCI", "HEALTH"});
  for (size_t column : {0, 3, 4, 5, 6}) table.AlignRight(column);
  for (const DeviceProperties& device : devices) {
    table.AddRow({absl::StrCat(device.index), device.name, device.backend,
                  FormatTorchSize(device.total_memory), FormatTorchSize(device.free_memory),
                  absl::StrCat(device.major, ".", device.minor),
                  absl::StrCat(device.multi_processor_count),
                  device.pci_bus_id.empty() ? "-" : device.pci_bus_id, device.health});
  }
  return table.Render();
}

}  // namespace gpumux
