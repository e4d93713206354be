// empty-cache: the operator's torch.cuda.empty_cache() for the whole daemon,
// on its admin socket (root or gpumuxd's user).

#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "client/cli/commands.h"
#include "client/cli/flag_parser.h"
#include "common/base/byte_size.h"
#include "gpumux/admin.h"

namespace gpumux {

int RunEmptyCache(const CommandContext& context, const std::vector<std::string>& args) {
  absl::StatusOr<ParsedArgs> parsed = ParseFlags(args, {{"device", true}});
  absl::Status status = parsed.status();
  if (status.ok() && !parsed->positional.empty()) {
    status = absl::InvalidArgumentError("unexpected argument " + parsed->positional.front());
  }
  absl::StatusOr<int64_t> device = 0;
  if (status.ok()) {
    device = IntFlag(*parsed, "device", 0, 0, std::numeric_limits<int32_t>::max());
    status = device.status();
  }
  if (!status.ok()) return UsageError(context, status.message(), kEmptyCacheUsage);

  std::optional<DeviceIndex> target;
  if (parsed->Has("device")) target = DeviceIndex(static_cast<int32_t>(*device));
  absl::StatusOr<ReleasedCache> result = Admin(context.address).EmptyCache(target);
  if (!result.ok()) return ReportError(context, result.status());
  if (result->released_segments == 0) {
    *context.out << "released nothing: no cached segment was free\n";
  } else {
    *context.out << "released " << result->released_bytes << " bytes ("
                 << FormatTorchSize(result->released_bytes) << ") in " << result->released_segments
                 << (result->released_segments == 1 ? " segment" : " segments") << "\n";
  }
  return kExitOk;
}

}  // namespace gpumux
