#include "client/grpc_status.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace gpumux {

absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view address) {
  if (status.ok()) return absl::OkStatus();
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    return UnreachableError(address, status.error_message());
  }
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

absl::Status UnreachableError(absl::string_view address, absl::string_view detail) {
  // Nothing listens there: say what to do about it.
  const bool nobody_there = absl::StrContains(detail, "failed to connect") ||
                            absl::StrContains(detail, "No such file") ||
                            absl::StrContains(detail, "Connection refused");
  return absl::UnavailableError(absl::StrCat(
      "cannot reach gpumuxd at ", address, ": ", detail,
      nobody_there
          ? "; is gpumuxd running? Start it (gpumuxd, or systemctl start gpumuxd) or point "
            "GPUMUX_ADDRESS (the CLI: --address) at its socket"
          : ""));
}

}  // namespace gpumux
