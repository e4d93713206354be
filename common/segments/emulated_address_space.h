#pragma once

// EmulatedAddressSpace: device addresses for a device that has none of its
// own (the host backend's emulated devices, a replay's addresses-only
// device). A span handed out first fit in address order at 2 MiB alignment;
// ranges given back merge with their free neighbours, and the lowest free
// address is reused first, as cudaMalloc tends to. Addresses only: the
// memory a device has is counted by its owner. Thread-compatible.

#include <cstdint>
#include <map>
#include <optional>

namespace gpumux {

class EmulatedAddressSpace {
 public:
  static constexpr uint64_t kAlignment = uint64_t{2} << 20;
  // Where emulated devices' addresses lie: device d's span of kSpan bytes
  // starts at kBase + d * kSpan, a region that looks like the user half of
  // a 47-bit address space.
  static constexpr uint64_t kBase = 0x7f0000000000;
  static constexpr uint64_t kSpan = uint64_t{1} << 42;

  // `size` rounded up to kAlignment.
  static uint64_t AlignUp(uint64_t size) {
    return (size + kAlignment - 1) / kAlignment * kAlignment;
  }

  // No addresses at all.
  EmulatedAddressSpace() = default;
  // [base, base + span), both multiples of kAlignment.
  EmulatedAddressSpace(uint64_t base, uint64_t span);

  // The lowest free range of AlignUp(size) bytes (size > 0), now taken; nullopt
  // when no free range is that long.
  std::optional<uint64_t> Take(uint64_t size);
  // Gives back a range Take returned, with the size it was asked for.
  // Precondition: taken and not given back since.
  void Give(uint64_t address, uint64_t size);

 private:
  std::map<uint64_t, uint64_t> free_;  // start -> length
};

}  // namespace gpumux
