#include "server/core/rendezvous_store.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "server/core/session_registry.h"

namespace gpumux {
namespace {

absl::Status Closed() {
  return absl::UnavailableError("the rendezvous is closed: the daemon is shutting down");
}

}  // namespace

absl::Status CheckGroupName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxGroupNameLength) {
    return absl::InvalidArgumentError(absl::StrCat("a group name has 1 to ", kMaxGroupNameLength,
                                                   " characters, not ", name.size()));
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return absl::InvalidArgumentError(
          absl::StrCat("group name \"", absl::CHexEscape(name), "\" may hold only [A-Za-z0-9._-]"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckRendezvousName(absl::string_view name) {
  const size_t at = name.find('@');
  if (at == absl::string_view::npos) return CheckGroupName(name);
  GPUMUX_RETURN_IF_ERROR(CheckGroupName(name.substr(0, at)));
  return CheckTenantName(name.substr(at + 1));
}

absl::Status CheckGroupRank(int64_t world_size, int64_t rank) {
  if (world_size < 1 || world_size > kMaxGroupWorldSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("a group's world size is 1 to ", kMaxGroupWorldSize, ", not ", world_size));
  }
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is out of range for world size ", world_size));
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::Duration> GroupTimeout(int64_t timeout_ms) {
  if (timeout_ms < 0 || absl::Milliseconds(timeout_ms) > kMaxGroupTimeout) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a group timeout is 0 (the default, ", absl::FormatDuration(kDefaultGroupTimeout), ") to ",
        absl::FormatDuration(kMaxGroupTimeout), ", not ", timeout_ms, " ms"));
  }
  return timeout_ms == 0 ? kDefaultGroupTimeout : absl::Milliseconds(timeout_ms);
}

RendezvousStore::~RendezvousStore() { Close(); }

void RendezvousStore::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

absl::StatusOr<RendezvousRound> RendezvousStore::Join(absl::string_view group, int world_size,
                                                      int rank, absl::string_view address,
                                                      absl::Duration timeout) {
  if (absl::Status status = CheckRendezvousName(group); !status.ok()) return status;
  if (absl::Status status = CheckGroupRank(world_size, rank); !status.ok()) return status;
  if (address.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a member address has at most ", kMaxKeyBytes,
                                                   " bytes, not ", address.size()));
  }
  absl::MutexLock lock(&mu_);
  if (closed_) return Closed();
  auto it = groups_.find(group);
  if (it == groups_.end()) {
    if (groups_.size() >= kMaxGroups) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the rendezvous holds ", kMaxGroups, " groups already; cannot add \"", group, "\""));
    }
    it = groups_.emplace(std::string(group), Group{}).first;
  }
  Group& g = it->second;
  if (g.pending == nullptr || g.pending->joined.empty()) {
    g.pending = std::make_shared<Round>();
    g.pending->world_size = world_size;
  } else if (g.pending->world_size != world_size) {
    return absl::FailedPreconditionError(absl::StrCat(
        "group \"", group, "\" is forming with world size ", g.pending->world_size, ", not ",
        world_size, " (ranks ",
        absl::StrJoin(
            g.pending->joined, ", ",
            [](std::string* out, const auto& entry) { absl::StrAppend(out, entry.first); }),
        " joined)"));
  }
  std::shared_ptr<Round> round = g.pending;
  round->joined[rank] = std::string(address);
  if (static_cast<int>(round->joined.size()) == world_size) {
    round->generation = g.generation + 1;
    g.generation = round->generation;
    g.world_size = world_size;
    g.keys.clear();
    g.pending = nullptr;
  } else {
    const auto done = [this, &round]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return round->generation != 0 || closed_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
    if (round->generation == 0) {
      if (closed_) return Closed();
      const size_t joined = round->joined.size();
      // Leave the round, unless another join of this rank took the place.
      auto mine = round->joined.find(rank);
      if (mine != round->joined.end() && mine->second == address) round->joined.erase(mine);
      std::vector<int> missing;
      for (int r = 0; r < world_size; ++r) {
        if (!round->joined.contains(r) && r != rank) missing.push_back(r);
      }
      return absl::DeadlineExceededError(
          absl::StrCat("group \"", group, "\": ", joined, " of ", world_size,
                       " ranks joined within ", absl::FormatDuration(timeout), "; missing rank",
                       missing.size() == 1 ? " " : "s ", absl::StrJoin(missing, ", ")));
    }
  }
  RendezvousRound result{round->generation, {}};
  for (const auto& [member_rank, member_address] : round->joined) {
    result.members.push_back(GroupMemberInfo{member_rank, member_address});
  }
  return result;
}

absl::StatusOr<RendezvousStore::Group*> RendezvousStore::CurrentRound(absl::string_view group,
                                                                      uint64_t generation) {
  auto it = groups_.find(group);
  if (it == groups_.end() || it->second.generation == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("group \"", group, "\" has no completed round at this rendezvous"));
  }
  if (it->second.generation != generation) {
    return absl::FailedPreconditionError(absl::StrCat("round ", generation, " of group \"", group,
                                                      "\" is not current: round ",
                                                      it->second.generation, " is"));
  }
  return &it->second;
}

absl::Status RendezvousStore::Set(absl::string_view group, uint64_t generation,
                                  absl::string_view key, absl::string_view value) {
  if (key.empty() || key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a rendezvous key has 1 to ", kMaxKeyBytes, " bytes, not ", key.size()));
  }
  if (value.size() > kMaxValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a rendezvous value has at most ",
                                                   kMaxValueBytes, " bytes, not ", value.size()));
  }
  absl::MutexLock lock(&mu_);
  if (closed_) return Closed();
  absl::StatusOr<Group*> g = CurrentRound(group, generation);
  if (!g.ok()) return g.status();
  Group& round = **g;
  if (!round.keys.contains(key) && round.keys.size() >= KeysPerRound(round.world_size)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("round ", generation, " of group \"", group, "\" holds ", round.keys.size(),
                     " keys, its limit for world size ", round.world_size));
  }
  round.keys[key] = std::string(value);
  return absl::OkStatus();
}

absl::StatusOr<std::string> RendezvousStore::Get(absl::string_view group, uint64_t generation,
                                                 absl::string_view key, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  if (closed_) return Closed();
  absl::StatusOr<Group*> g = CurrentRound(group, generation);
  if (!g.ok()) return g.status();
  const std::string name(group);
  const std::string wanted(key);
  // Done when the key is there, the round is over, or the store closes.
  const auto done = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    if (closed_) return true;
    auto it = groups_.find(name);
    return it == groups_.end() || it->second.generation != generation ||
           it->second.keys.contains(wanted);
  };
  mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  if (closed_) return Closed();
  g = CurrentRound(group, generation);
  if (!g.ok()) return g.status();
  auto value = (*g)->keys.find(wanted);
  if (value == (*g)->keys.end()) {
    return absl::DeadlineExceededError(absl::StrCat(
        "round ", generation, " of group \"", group, "\": key \"", absl::CHexEscape(key),
        "\" was not set within ", absl::FormatDuration(timeout)));
  }
  return value->second;
}

}  // namespace gpumux
