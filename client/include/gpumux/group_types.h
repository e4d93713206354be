#pragma once

// The Client's groups of daemons (proto/gpumux/v1/group.proto,
// gpumux/distributed.h): forming one, and what the daemon tells of it.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gpumux/common/ids.h"

namespace gpumux {

struct FormGroupOptions {
  // 1 to 128 characters of [A-Za-z0-9._-].
  std::string name;
  int world_size = 1;
  // This daemon's rank; rank 0's daemon serves the rendezvous.
  int rank = 0;
  // "HOST:PORT" of rank 0's daemon's TCP listener (full mode); rank 0 may
  // leave it empty.
  std::string rendezvous_address;
  // How long forming and each collective may wait for the other daemons;
  // zero: the daemon's default (30 s).
  absl::Duration timeout = absl::ZeroDuration();
  // Where every member daemon has NCCL (CUDA), collectives on tensors on
  // this device of each daemon run on an NCCL communicator of the group;
  // tensors elsewhere go through host memory and Gloo.
  DeviceIndex device;
};

struct DaemonGroupMember {
  int rank = 0;
  std::string address;  // "" for a daemon without a TCP listener
};

struct DaemonGroupInfo {
  std::string name;
  int world_size = 1;
  int rank = 0;
  std::string rendezvous_address;
  uint64_t generation = 0;  // the rendezvous round it was formed in
  std::vector<DaemonGroupMember> members;
  absl::Duration timeout;
  std::string state;  // "ready" or "broken"
  std::string error;  // why it broke
  uint64_t collectives = 0;
  uint64_t bytes = 0;
  absl::Time formed_at;
  absl::Duration form_time;
  DeviceIndex device;                // FormGroupOptions::device
  bool device_communicator = false;  // NCCL on `device` (every member has it)
  std::string tenant;                // whose group it is; "" for sessions opened without a tenant
  SessionId owner;                   // the session that formed it (the group ends with it)
};

}  // namespace gpumux
