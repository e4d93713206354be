#pragma once

// RngGenerators: torch.cuda.random's per-device generator state for every
// session, {seed, offset} of common/tensor/philox.h's Philox4x32-10 stream. Seeds and
// offsets follow PyTorch: manual_seed resets the offset to 0, seed() draws a
// 53-bit non-deterministic seed, the 16-byte state is seed (u64 LE) then
// offset (u64 LE), offsets stay multiples of 4. A generator starts, like
// PyTorch's default CUDA generators, with a non-deterministic seed.
// Generators exist from AddSession to RemoveSession; a call for a session
// not added (one that just ended) changes nothing and keeps nothing: it acts
// on a fresh generator thrown away afterwards. Every call naming a device
// checks it first: INVALID_ARGUMENT (CheckDeviceInRange's message) for one
// outside [0, device_count), changing nothing. Thread-safe.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "gpumux/common/ids.h"

namespace gpumux {

struct RngState {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

class RngGenerators {
 public:
  explicit RngGenerators(int device_count) : device_count_(device_count) {}

  // Starts the session's generators, each with a non-deterministic seed.
  void AddSession(SessionId session);

  // torch.cuda.manual_seed / manual_seed_all: offset back to 0.
  absl::Status ManualSeed(SessionId session, DeviceIndex device, uint64_t seed);
  void ManualSeedAll(SessionId session, uint64_t seed);
  // torch.cuda.seed / seed_all: a fresh 53-bit seed, returned. seed_all
  // seeds every device with the same value, as PyTorch does.
  absl::StatusOr<uint64_t> Seed(SessionId session, DeviceIndex device);
  uint64_t SeedAll(SessionId session);
  // torch.cuda.initial_seed: the last seed set.
  absl::StatusOr<uint64_t> InitialSeed(SessionId session, DeviceIndex device);

  // get_rng_state: 16 bytes, seed then offset, little-endian.
  absl::StatusOr<std::string> GetState(SessionId session, DeviceIndex device);
  // get_rng_state_all: GetState of every device, in device order.
  std::vector<std::string> GetStateAll(SessionId session);
  // set_rng_state: 16 bytes, or 8 (seed only, offset 0). INVALID_ARGUMENT
  // "RNG state is wrong size" or "offset must be a multiple of 4".
  absl::Status SetState(SessionId session, DeviceIndex device, absl::string_view state);
  // set_rng_state_all: one state per device, each checked as SetState does
  // before any is set. INVALID_ARGUMENT also for a count other than the
  // number of devices.
  absl::Status SetStateAll(SessionId session, absl::Span<const std::string> states);

  // The state a Generate call uses, and advances the offset by `increment`
  // (a multiple of 4) in the same step, as philox_cuda_state does.
  // FAILED_PRECONDITION, advancing nothing, when the offset would wrap past
  // 2^64 (the numbers would repeat from the start of the Philox stream).
  absl::StatusOr<RngState> Advance(SessionId session, DeviceIndex device, uint64_t increment);

  void RemoveSession(SessionId session);

 private:
  // The session's generator for `device`, or `*scratch` (freshly seeded)
  // for a session not added; INVALID_ARGUMENT for a device out of range.
  absl::StatusOr<RngState*> StateLocked(SessionId session, DeviceIndex device, RngState* scratch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int device_count_;
  absl::Mutex mu_;
  absl::flat_hash_map<SessionId, std::vector<RngState>> states_ ABSL_GUARDED_BY(mu_);
};

// PyTorch's getNonDeterministicRandom(is_cuda=true): 53 random bits.
uint64_t NonDeterministicSeed();

}  // namespace gpumux
