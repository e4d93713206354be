#pragma once

// Strong identity types. Each wraps an integer with an explicit constructor so
// a session id cannot be passed where an allocation id is expected.

#include <cstdint>
#include <functional>
#include <string>

namespace gpumux {

template <typename Tag, typename T>
class StrongId {
 public:
  using ValueType = T;
  constexpr StrongId() = default;
  constexpr explicit StrongId(T value) : value_(value) {}
  constexpr T value() const { return value_; }
  friend constexpr auto operator<=>(StrongId, StrongId) = default;
  template <typename H>
  friend H AbslHashValue(H h, StrongId id) {
    return H::combine(std::move(h), id.value_);
  }
  friend std::string ToString(StrongId id) { return std::to_string(id.value_); }

 private:
  T value_{};
};

using DeviceIndex = StrongId<struct DeviceIndexTag, int32_t>;
using SessionId = StrongId<struct SessionIdTag, uint64_t>;
using AllocationId = StrongId<struct AllocationIdTag, uint64_t>;
using SegmentId = StrongId<struct SegmentIdTag, uint64_t>;
// 0 is the owning session's default stream on the device.
using StreamId = StrongId<struct StreamIdTag, uint64_t>;
using EventId = StrongId<struct EventIdTag, uint64_t>;

}  // namespace gpumux

template <typename Tag, typename T>
struct std::hash<gpumux::StrongId<Tag, T>> {
  size_t operator()(gpumux::StrongId<Tag, T> id) const { return std::hash<T>()(id.value()); }
};
