#pragma once

// torch.cuda.random for a Client's session: its generators' seeds and
// states, and random fills of its buffers.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "gpumux/client.h"
#include "gpumux/common/ids.h"
#include "gpumux/copy_options.h"
#include "gpumux/device_buffer.h"
#include "gpumux/random_options.h"

namespace gpumux {
namespace random {

// Per session and device a Philox4x32-10 generator with state {seed,
// offset}. `device` absent: the calling thread's current device. A device
// out of range is INVALID_ARGUMENT (the daemon's).
// torch.cuda.manual_seed(seed): offset back to 0.
absl::Status ManualSeed(Client& client, uint64_t seed,
                        std::optional<DeviceIndex> device = std::nullopt);
// torch.cuda.manual_seed_all(seed)
absl::Status ManualSeedAll(Client& client, uint64_t seed);
// torch.cuda.seed(): a non-deterministic 53-bit seed, set and returned.
absl::StatusOr<uint64_t> Seed(Client& client, std::optional<DeviceIndex> device = std::nullopt);
// torch.cuda.seed_all(): the same fresh seed on every device.
absl::StatusOr<uint64_t> SeedAll(Client& client);
// torch.cuda.initial_seed(): the last seed set.
absl::StatusOr<uint64_t> InitialSeed(Client& client,
                                     std::optional<DeviceIndex> device = std::nullopt);
// torch.cuda.get_rng_state(device): 16 bytes, seed then offset (u64 LE).
absl::StatusOr<std::string> GetRngState(Client& client,
                                        std::optional<DeviceIndex> device = std::nullopt);
// torch.cuda.set_rng_state(state, device): 16 bytes, or 8 (seed only).
// INVALID_ARGUMENT "RNG state is wrong size" or "offset must be a multiple
// of 4" (the daemon's).
absl::Status SetRngState(Client& client, absl::string_view state,
                         std::optional<DeviceIndex> device = std::nullopt);
// torch.cuda.get_rng_state_all() / set_rng_state_all(states): one state
// per device, in order; INVALID_ARGUMENT unless exactly one per device.
absl::StatusOr<std::vector<std::string>> GetRngStateAll(Client& client);
absl::Status SetRngStateAll(Client& client, absl::Span<const std::string> states);
// Fills `elements` contiguous values of `dtype` at `offset` bytes into
// `dst` from the generator of dst's device, advancing its offset by a
// multiple of 4 as PyTorch does; the bits are common/tensor/philox.h's.
// options.path is ignored. INVALID_ARGUMENT for bad parameters,
// OUT_OF_RANGE when the values do not fit `dst` (the daemon's).
absl::StatusOr<GenerateResult> Generate(Client& client, const DeviceBuffer& dst, uint64_t offset,
                                        Dtype dtype, uint64_t elements,
                                        const Distribution& distribution,
                                        const CopyOptions& options = CopyOptions());

}  // namespace random
}  // namespace gpumux
