#pragma once

// `gpumux groups`: the groups of daemons a daemon is in, as a table or JSON.

#include <string>
#include <vector>

#include "gpumux/group_types.h"

namespace gpumux {

// NAME, RANK (r/world), ROUND, STATE, MEMBERS (rank=address), COLLECTIVES,
// BYTES, FORMED (UTC), FORM TIME, and for a broken group its error on a line
// of its own; "no groups" when there are none.
std::string FormatGroupsTable(const std::vector<DaemonGroupInfo>& groups);
// An array of objects with every field of DaemonGroupInfo.
std::string FormatGroupsJson(const std::vector<DaemonGroupInfo>& groups);

}  // namespace gpumux
