#include "common/net/host_port.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gpumux {

absl::StatusOr<HostPort> ParseHostPort(absl::string_view flag, absl::string_view address) {
  const size_t colon = address.rfind(':');
  const std::string quoted = absl::StrCat(flag, " '", address, "'");
  if (colon == absl::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(quoted, ": expected HOST:PORT, e.g. 0.0.0.0:50051"));
  }
  absl::string_view host = address.substr(0, colon);
  const absl::string_view port = address.substr(colon + 1);
  uint32_t number = 0;
  if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), ::isdigit) ||
      !absl::SimpleAtoi(port, &number) || number > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        quoted, ": port '", port, "' is not a number in 0-65535 (0 picks a free port)"));
  }
  if (host.front() == '[' || host.find(':') != absl::string_view::npos) {
    if (!(host.size() > 2 && host.front() == '[' && host.back() == ']')) {
      return absl::InvalidArgumentError(
          absl::StrCat(quoted, ": an IPv6 host goes in brackets, e.g. [::1]:50051"));
    }
    host = host.substr(1, host.size() - 2);
  }
  return HostPort{.host = std::string(host), .port = static_cast<uint16_t>(number)};
}

}  // namespace gpumux
