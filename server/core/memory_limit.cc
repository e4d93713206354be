#include "server/core/memory_limit.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gpumux {

absl::StatusOr<uint64_t> LimitInBytes(const MemoryLimit& limit, uint64_t total_memory) {
  switch (limit.kind) {
    case MemoryLimit::Kind::kFraction: {
      // Written so that NaN fails too.
      if (!(limit.fraction >= 0 && limit.fraction <= 1)) {
        return absl::InvalidArgumentError(
            absl::StrCat("Invalid fraction value: ", limit.fraction, ". Allowed range: 0~1"));
      }
      // PyTorch: allowed_memory_maximum = fraction * total.
      const auto bytes = static_cast<uint64_t>(limit.fraction * static_cast<double>(total_memory));
      return bytes == 0 ? 1 : bytes;
    }
    case MemoryLimit::Kind::kBytes:
      if (limit.bytes == 0) {
        return absl::InvalidArgumentError(
            "a byte limit must be positive; set unlimited to remove the limit");
      }
      return limit.bytes;
    case MemoryLimit::Kind::kUnlimited:
      break;
  }
  return 0;
}

}  // namespace gpumux
