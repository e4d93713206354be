#include "common/base/random_hex.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <vector>

namespace gpumux {

std::string RandomHex(int bytes) {
  std::vector<uint8_t> raw(static_cast<size_t>(bytes));
  size_t filled = 0;
  while (filled < raw.size()) {
    ssize_t n = getrandom(raw.data() + filled, raw.size() - filled, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      // getrandom cannot fail on a supported kernel once the pool is ready;
      // carrying on with predictable secrets would be worse than stopping.
      std::abort();
    }
    filled += static_cast<size_t>(n);
  }
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(raw.size() * 2);
  for (uint8_t b : raw) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

bool IsLowerHex(const std::string& text, size_t digits) {
  if (text.size() != digits) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace gpumux
