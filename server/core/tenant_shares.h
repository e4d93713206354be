#pragma once

// TenantShares: what each tenant holds of one daemon-wide budget (sessions,
// streams, events, share tokens), so that no tenant holds more than a
// quarter of it and one that fills its share leaves the rest to the others.
// Tenants here are NamedTenant (server/core/session_registry.h): the
// sessions opened without a tenant count as one. The daemon-wide limit
// stays above the shares. Thread-safe; its owner may also hold its own lock
// around the calls (this one is taken last).

#include <algorithm>
#include <cstddef>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/core/limit_refusal.h"

namespace gpumux {

class TenantShares {
 public:
  // One tenant's share of a daemon-wide limit: a quarter (at least 1).
  static constexpr size_t ShareOf(size_t daemon_limit) {
    return std::max<size_t>(1, daemon_limit / 4);
  }

  // `what` names the budget in messages ("streams"), `flag` its daemon-wide
  // limit ("--max-streams") in log lines.
  TenantShares(std::string what, std::string flag)
      : what_(std::move(what)), refusal_(absl::StrCat("a tenant's share of ", flag)) {}

  // Takes `count` for `tenant`: RESOURCE_EXHAUSTED, naming the tenant, what
  // it holds and its share of `daemon_limit`, when that passes its share
  // (nothing is taken then).
  absl::Status Take(absl::string_view tenant, size_t daemon_limit, size_t count = 1);
  // Gives back what Take took.
  void Give(absl::string_view tenant, size_t count = 1);

 private:
  const std::string what_;
  LimitRefusal refusal_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, size_t> held_ ABSL_GUARDED_BY(mu_);
};

// How messages name a tenant: "tenant 'NAME'", or "the sessions without a
// tenant".
std::string TenantLabel(absl::string_view tenant);

}  // namespace gpumux
