#include "gpumux/common/default_address.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace gpumux {

std::string DefaultSocketPath() {
  if (geteuid() != 0) {
    if (const char* runtime = std::getenv("XDG_RUNTIME_DIR");
        runtime != nullptr && *runtime != '\0') {
      return absl::StrCat(runtime, "/gpumux.sock");
    }
  }
  return "/run/gpumux/gpumux.sock";
}

std::string DefaultAddress() {
  if (const char* address = std::getenv("GPUMUX_ADDRESS"); address != nullptr && *address != '\0') {
    return ToGrpcTarget(address);
  }
  return ToGrpcTarget(DefaultSocketPath());
}

std::string ToGrpcTarget(absl::string_view address) {
  if (absl::StartsWith(address, "/")) return absl::StrCat("unix://", address);
  return std::string(address);
}

}  // namespace gpumux
