// replay: a recorded PyTorch allocation trace through gpumux's allocator, in
// this process (InProcessTarget) or through the daemon at --address
// (ClientReplayTarget), both from replay/; with --emulate-gpu-lag the
// client's streams run each free's kernels late (HostLocalStreams).

#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "allocator/allocator_config.h"
#include "client/cli/commands.h"
#include "client/cli/flag_parser.h"
#include "gpumux/client.h"
#include "gpumux/host_local_streams.h"
#include "replay/client_target.h"
#include "replay/inprocess_target.h"
#include "replay/trace_replay.h"

namespace gpumux {
namespace {

// --emulate-gpu-lag: a duration ("10ms": each free's kernels complete that
// long after it) or a count of operations ("100ops": they complete once
// that many more frees queued theirs).
struct GpuLag {
  bool emulated = false;
  absl::Duration time;
  uint64_t operations = 0;
};

absl::StatusOr<GpuLag> ParseGpuLag(absl::string_view text) {
  GpuLag lag;
  lag.emulated = true;
  if (absl::ConsumeSuffix(&text, "ops")) {
    if (absl::SimpleAtoi(text, &lag.operations)) return lag;
  } else if (absl::ParseDuration(text, &lag.time) && lag.time >= absl::ZeroDuration() &&
             lag.time < absl::InfiniteDuration()) {
    return lag;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--emulate-gpu-lag=", text,
                   ": give a duration (10ms, 1s) or a number of operations (100ops)"));
}

}  // namespace

int RunReplay(const CommandContext& context, const std::vector<std::string>& args) {
  absl::StatusOr<ParsedArgs> parsed = ParseFlags(
      args,
      {{"repeat", true}, {"device", true}, {"allocator-conf", true}, {"emulate-gpu-lag", true}});
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
  absl::StatusOr<GpuLag> lag = GpuLag();
  if (status.ok()) {
    if (std::optional<std::string> text = parsed->Get("emulate-gpu-lag"); text.has_value()) {
      lag = ParseGpuLag(*text);
      status.Update(lag.status());
      if (status.ok() && !context.address_given) {
        status = absl::InvalidArgumentError(
            "--emulate-gpu-lag emulates the kernels of a client of the daemon: give --address");
      }
    }
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
    std::shared_ptr<HostLocalStreams> streams;
    if (lag->emulated) {
      streams = std::make_shared<HostLocalStreams>(
          HostLocalStreams::Options{.lag_operations = lag->operations});
      options.local_streams = streams;
    }
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(context.address, options);
    if (!client.ok()) return ReportError(context, client.status());
    if (streams != nullptr && (*client)->backend() != "host") {
      return ReportError(context, absl::FailedPreconditionError(absl::StrCat(
                                      "--emulate-gpu-lag needs a host-backend daemon; this one's "
                                      "backend is ",
                                      (*client)->backend(), ", whose streams are real")));
    }
    const DeviceIndex on(static_cast<int32_t>(*device));
    ClientReplayTarget target = streams == nullptr
                                    ? ClientReplayTarget(**client, on)
                                    : ClientReplayTarget(**client, on, streams.get(), lag->time);
    result = Replay(*events, target, static_cast<int>(*repeat));
  }
  if (!result.ok()) return ReportError(context, result.status());
  *context.out << FormatReplayResult(*result);
  return kExitOk;
}

}  // namespace gpumux
