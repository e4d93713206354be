#include "server/core/rng_generators.h"

#include <sys/random.h>

#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/device_range.h"
#include "common/base/status_macros.h"

namespace gpumux {

uint64_t NonDeterministicSeed() {
  uint64_t value = 0;
  while (getrandom(&value, sizeof(value), 0) != static_cast<ssize_t>(sizeof(value))) {
  }
  return value & 0x1FFFFFFFFFFFFFull;
}

void RngGenerators::AddSession(SessionId session) {
  std::vector<RngState> states(static_cast<size_t>(device_count_));
  for (RngState& s : states) s.seed = NonDeterministicSeed();
  absl::MutexLock lock(&mu_);
  states_.emplace(session, std::move(states));
}

absl::StatusOr<RngState*> RngGenerators::StateLocked(SessionId session, DeviceIndex device,
                                                     RngState* scratch) {
  // The check guards the index below: `device` is request data.
  GPUMUX_RETURN_IF_ERROR(CheckDeviceInRange(device, device_count_));
  auto it = states_.find(session);
  if (it == states_.end()) {
    *scratch = RngState{NonDeterministicSeed(), 0};
    return scratch;
  }
  return &it->second[static_cast<size_t>(device.value())];
}

absl::Status RngGenerators::ManualSeed(SessionId session, DeviceIndex device, uint64_t seed) {
  absl::MutexLock lock(&mu_);
  RngState scratch;
  GPUMUX_ASSIGN_OR_RETURN(RngState * state, StateLocked(session, device, &scratch));
  *state = RngState{seed, 0};
  return absl::OkStatus();
}

void RngGenerators::ManualSeedAll(SessionId session, uint64_t seed) {
  absl::MutexLock lock(&mu_);
  auto it = states_.find(session);
  if (it == states_.end()) return;  // nothing kept for a session not added
  for (RngState& state : it->second) state = RngState{seed, 0};
}

absl::StatusOr<uint64_t> RngGenerators::Seed(SessionId session, DeviceIndex device) {
  uint64_t seed = NonDeterministicSeed();
  GPUMUX_RETURN_IF_ERROR(ManualSeed(session, device, seed));
  return seed;
}

uint64_t RngGenerators::SeedAll(SessionId session) {
  uint64_t seed = NonDeterministicSeed();
  ManualSeedAll(session, seed);
  return seed;
}

absl::StatusOr<uint64_t> RngGenerators::InitialSeed(SessionId session, DeviceIndex device) {
  absl::MutexLock lock(&mu_);
  RngState scratch;
  GPUMUX_ASSIGN_OR_RETURN(RngState * state, StateLocked(session, device, &scratch));
  return state->seed;
}

namespace {

// 16 bytes: seed then offset, little-endian.
std::string StateBytes(const RngState& state) {
  std::string bytes(16, '\0');
  for (int i = 0; i < 8; ++i) {
    bytes[static_cast<size_t>(i)] = static_cast<char>(state.seed >> (8 * i));
    bytes[static_cast<size_t>(8 + i)] = static_cast<char>(state.offset >> (8 * i));
  }
  return bytes;
}

}  // namespace

absl::StatusOr<std::string> RngGenerators::GetState(SessionId session, DeviceIndex device) {
  RngState state;
  {
    absl::MutexLock lock(&mu_);
    RngState scratch;
    GPUMUX_ASSIGN_OR_RETURN(RngState * found, StateLocked(session, device, &scratch));
    state = *found;
  }
  return StateBytes(state);
}

std::vector<std::string> RngGenerators::GetStateAll(SessionId session) {
  std::vector<RngState> states;
  {
    absl::MutexLock lock(&mu_);
    auto it = states_.find(session);
    if (it != states_.end()) {
      states = it->second;
    } else {
      for (int d = 0; d < device_count_; ++d) states.push_back(RngState{NonDeterministicSeed(), 0});
    }
  }
  std::vector<std::string> out;
  out.reserve(states.size());
  for (const RngState& state : states) out.push_back(StateBytes(state));
  return out;
}

namespace {

// get_rng_state's bytes back into a state, with PyTorch's messages.
absl::StatusOr<RngState> ParseState(absl::string_view bytes) {
  if (bytes.size() != 16 && bytes.size() != 8)
    return absl::InvalidArgumentError("RNG state is wrong size");
  auto read = [&](size_t at) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
      v |= uint64_t{static_cast<unsigned char>(bytes[at + static_cast<size_t>(i)])} << (8 * i);
    return v;
  };
  RngState state{read(0), bytes.size() == 16 ? read(8) : 0};
  if (state.offset % 4 != 0) return absl::InvalidArgumentError("offset must be a multiple of 4");
  return state;
}

}  // namespace

absl::Status RngGenerators::SetState(SessionId session, DeviceIndex device,
                                     absl::string_view bytes) {
  absl::StatusOr<RngState> state = ParseState(bytes);
  if (!state.ok()) return state.status();
  absl::MutexLock lock(&mu_);
  RngState scratch;
  GPUMUX_ASSIGN_OR_RETURN(RngState * slot, StateLocked(session, device, &scratch));
  *slot = *state;
  return absl::OkStatus();
}

absl::Status RngGenerators::SetStateAll(SessionId session, absl::Span<const std::string> states) {
  if (states.size() != static_cast<size_t>(device_count_)) {
    return absl::InvalidArgumentError(absl::StrCat("set_rng_state_all takes one state per device (",
                                                   device_count_, "), not ", states.size()));
  }
  std::vector<RngState> parsed;
  for (const std::string& bytes : states) {
    absl::StatusOr<RngState> state = ParseState(bytes);
    if (!state.ok()) return state.status();
    parsed.push_back(*state);
  }
  absl::MutexLock lock(&mu_);
  auto it = states_.find(session);
  if (it != states_.end()) it->second = std::move(parsed);  // nothing kept for a session not added
  return absl::OkStatus();
}

absl::StatusOr<RngState> RngGenerators::Advance(SessionId session, DeviceIndex device,
                                                uint64_t increment) {
  absl::MutexLock lock(&mu_);
  RngState scratch;
  GPUMUX_ASSIGN_OR_RETURN(RngState * found, StateLocked(session, device, &scratch));
  RngState& state = *found;
  if (increment > std::numeric_limits<uint64_t>::max() - state.offset) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the RNG offset ", state.offset, " of device ", device.value(), " cannot advance by ",
        increment, " without wrapping past 2^64; set a new state (manual_seed or set_rng_state)"));
  }
  RngState before = state;
  state.offset += increment;
  return before;
}

void RngGenerators::RemoveSession(SessionId session) {
  absl::MutexLock lock(&mu_);
  states_.erase(session);
}

}  // namespace gpumux
