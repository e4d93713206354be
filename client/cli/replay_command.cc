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
  absl::StatusOr<ParsedArgs> parsed =
      ParseFlags(args, {{"repeat", true}, {"device", true}, {"allocator-conf", true}});
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
  // PYTORCH_CUDA_ALLOC_CONF text for the in-process allocator; a daemon's
  // allocator is configured where it starts (gpumuxd --allocator-conf).
  const std::string conf = status.ok() ? parsed->Get("allocator-conf").value_or("") : "";
  if (status.ok() && !conf.empty() && context.address_given) {
    status = absl::InvalidArgumentError(
        "--allocator-conf configures the in-process allocator; with --address the daemon's "
        "allocator is configured by gpumuxd --allocator-conf");
  }
  absl::StatusOr<AllocatorOptions> allocator_options = AllocatorOptions();
  if (status.ok()) {
    allocator_options = AllocatorOptions::Parse(conf);
    status.Update(allocator_options.status());
  }
  if (!status.ok()) return UsageError(context, status.message(), kReplayUsage);

  absl::StatusOr<std::vector<TraceEvent>> events = LoadTrace(parsed->positional.front());
  if (!events.ok()) return ReportError(context, events.status());

  absl::StatusOr<ReplayResult> result;
  if (!context.address_given) {
    absl::StatusOr<std::unique_ptr<InProcessTarget>> target =
        InProcessTarget::Create(*allocator_options);
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
