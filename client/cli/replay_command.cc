// replay: a recorded PyTorch allocation trace through gpumux's allocator, in
// this process (InProcessTarget) or through the daemon at --address
// (ClientReplayTarget), both from replay/.

#include <limits>
#include <memory>

#include "allocator/allocator_config.h"
#include "client/cli/commands.h"
#include "client/cli/flag_parser.h"
#include "client/client.h"
#include "replay/client_target.h"
#include "replay/inprocess_target.h"
#include "replay/trace_replay.h"

namespace gpumux {

int RunReplay(const CommandContext& context, const std::vector<std::string>& args) {
  absl::StatusOr<ParsedArgs> parsed = ParseFlags(args, {{"repeat", true}, {"device", true}});
  absl::Status status = parsed.status();
  if (status.ok() && parsed->positional.size() != 1) {
    status = absl::InvalidArgumentError(parsed->positional.empty() ? "replay needs a trace file"
                                                                   : "replay takes one trace file");
  }
  absl::StatusOr<int64_t> repeat = 1;
  absl::StatusOr<int64_t> device = 0;
  if (status.ok()) {
    repeat = IntFlag(*parsed, "repeat", 1, 1, std::numeric_limits<int32_t>::max());
    device = IntFlag(*parsed, "device", 0, 0, std::numeric_limits<int32_t>::max());
    status.Update(repeat.status());
    status.Update(device.status());
  }
  if (!status.ok()) return UsageError(context, status.message(), kReplayUsage);

  absl::StatusOr<std::vector<TraceEvent>> events = LoadTrace(parsed->positional.front());
  if (!events.ok()) return ReportError(context, events.status());

  absl::StatusOr<ReplayResult> result;
  if (!context.address_given) {
    absl::StatusOr<std::unique_ptr<InProcessTarget>> target =
        InProcessTarget::Create(AllocatorOptions());
    if (!target.ok()) return ReportError(context, target.status());
    result = Replay(*events, **target, static_cast<int>(*repeat));
  } else {
    ClientOptions options;
    options.client_name = "gpumux replay";
    options.security = context.security;
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(context.address, options);
    if (!client.ok()) return ReportError(context, client.status());
    ClientReplayTarget target(**client, DeviceIndex(static_cast<int32_t>(*device)));
    result = Replay(*events, target, static_cast<int>(*repeat));
  }
  if (!result.ok()) return ReportError(context, result.status());
  *context.out << FormatReplayResult(*result);
  return kExitOk;
}

}  // namespace gpumux
