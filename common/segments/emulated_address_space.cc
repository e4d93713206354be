#include "common/segments/emulated_address_space.h"

#include <cassert>
#include <iterator>

namespace gpumux {

EmulatedAddressSpace::EmulatedAddressSpace(uint64_t base, uint64_t span) {
  assert(base % kAlignment == 0 && span % kAlignment == 0);
  if (span > 0) free_.emplace(base, span);
}

std::optional<uint64_t> EmulatedAddressSpace::Take(uint64_t size) {
  const uint64_t span = AlignUp(size);
  auto it = free_.begin();
  while (it != free_.end() && it->second < span) ++it;
  if (it == free_.end()) return std::nullopt;
  const uint64_t address = it->first;
  const uint64_t remaining = it->second - span;
  free_.erase(it);
  if (remaining > 0) free_.emplace(address + span, remaining);
  return address;
}

void EmulatedAddressSpace::Give(uint64_t address, uint64_t size) {
  uint64_t start = address;
  uint64_t length = AlignUp(size);
  // Merged with the neighbours it touches, so that large ranges fit again.
  auto next = free_.lower_bound(start);
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    assert(prev->first + prev->second <= start);
    if (prev->first + prev->second == start) {
      start = prev->first;
      length += prev->second;
      free_.erase(prev);
    }
  }
  if (next != free_.end()) {
    assert(start + length <= next->first);
    if (start + length == next->first) {
      length += next->second;
      free_.erase(next);
    }
  }
  free_.emplace(start, length);
}

}  // namespace gpumux
