#include "gpumux/current_streams.h"

#include <atomic>

#include "absl/container/flat_hash_map.h"

namespace gpumux {
namespace {

struct ThreadState {
  DeviceIndex device;
  absl::flat_hash_map<DeviceIndex, CurrentStreams::Entry> streams;
};

// Keyed by CurrentStreams::key_, not by address: addresses are reused.
thread_local absl::flat_hash_map<uint64_t, ThreadState> thread_states;

uint64_t NextKey() {
  // Only uniqueness matters; no other memory is published through it.
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

CurrentStreams::CurrentStreams() : key_(NextKey()) {}

CurrentStreams::~CurrentStreams() { thread_states.erase(key_); }

DeviceIndex CurrentStreams::device() const {
  auto it = thread_states.find(key_);
  return it == thread_states.end() ? DeviceIndex(0) : it->second.device;
}

void CurrentStreams::set_device(DeviceIndex device) { thread_states[key_].device = device; }

CurrentStreams::Entry CurrentStreams::stream(DeviceIndex device) const {
  auto it = thread_states.find(key_);
  if (it == thread_states.end()) return Entry();
  auto stream = it->second.streams.find(device);
  return stream == it->second.streams.end() ? Entry() : stream->second;
}

void CurrentStreams::set_stream(DeviceIndex device, Entry entry) {
  thread_states[key_].streams[device] = entry;
}

}  // namespace gpumux
