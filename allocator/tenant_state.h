#pragma once

// TenantState: what a DeviceAllocator keeps per tenant on one device. A
// tenant groups clients (a pod's several processes, each its own daemon
// session) under one byte limit over all their segments together; the sum
// is kept as segments come and go, so the check of a new segment is O(1)
// and happens under the device's mutex with the segment's charge, which no
// concurrent client can slip between. Plain data guarded by the
// DeviceAllocator's mutex; clients point at it directly.

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_set.h"

namespace gpumux {

struct ClientState;

struct TenantState {
  std::string name;
  // Cap on `reserved`, checked before each new segment of a client; 0 = none.
  uint64_t limit = 0;
  // Bytes of the segments its clients own (the sum of their reserved_bytes).
  uint64_t reserved = 0;
  // Its clients, removed ones included until their last segment goes.
  absl::flat_hash_set<ClientState*> clients;
};

}  // namespace gpumux
