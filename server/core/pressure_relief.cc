#include "server/core/pressure_relief.h"

#include "absl/time/clock.h"

namespace gpumux {

std::vector<SessionId> PressureRelief::Holders(SessionId session, DeviceIndex device,
                                               const absl::Status& refusal, bool count_oom) {
  const Shortage shortage = ShortageOf(refusal);
  std::vector<SessionId> holders = memory_->PressureCandidates(session, device, shortage);
  if (holders.empty() && count_oom && shortage != Shortage::kNone)
    memory_->CountOom(session, device);
  return holders;
}

absl::StatusOr<AllocationView> PressureRelief::AskAndRetry(
    DeviceIndex device, absl::Span<const SessionId> holders,
    absl::FunctionRef<absl::StatusOr<AllocationView>()> retry) {
  memory_->AskToRelease(device, holders, [&] {
    queries_->ReleaseCached(holders, device, absl::Now() + reply_timeout_);
  });
  return retry();
}

}  // namespace gpumux
