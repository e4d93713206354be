#include "client/cli/devices_format.h"

#include "absl/strings/str_cat.h"
#include "client/cli/text_table.h"
#include "common/byte_size.h"
#include "common/json_writer.h"

namespace gpumux {

std::string FormatDevicesJson(const v1::ListDevicesResponse& devices) {
  JsonWriter json;
  json.BeginArray();
  for (const v1::DeviceProperties& device : devices.devices()) {
    json.BeginObject();
    json.Key("index");
    json.Int(device.index());
    json.Key("name");
    json.String(device.name());
    json.Key("backend");
    json.String(device.backend());
    json.Key("total_memory");
    json.Uint(device.total_memory());
    json.Key("free_memory");
    json.Uint(device.free_memory());
    json.Key("major");
    json.Int(device.major());
    json.Key("minor");
    json.Int(device.minor());
    json.Key("multi_processor_count");
    json.Int(device.multi_processor_count());
    json.EndObject();
  }
  json.EndArray();
  return absl::StrCat(json.str(), "\n");
}

std::string FormatDevicesTable(const v1::ListDevicesResponse& devices) {
  TextTable table({"INDEX", "NAME", "BACKEND", "TOTAL", "FREE", "CAPABILITY", "SMS"});
  for (size_t column : {0, 3, 4, 5, 6}) table.AlignRight(column);
  for (const v1::DeviceProperties& device : devices.devices()) {
    table.AddRow({absl::StrCat(device.index()), device.name(), device.backend(),
                  FormatTorchSize(device.total_memory()), FormatTorchSize(device.free_memory()),
                  absl::StrCat(device.major(), ".", device.minor()),
                  absl::StrCat(device.multi_processor_count())});
  }
  return table.Render();
}

}  // namespace gpumux
