#pragma once

// `gpumux sessions` output: who holds what. The table has one row per session
// and device it uses (the session's columns, including its live stream and
// event counts, only on its first row; "-" for a session holding no memory);
// JSON is a list of SessionInfo objects with labels as an object, "streams"
// and "events" as numbers, and per-device usage as a list.

#include <string>
#include <vector>

#include "gpumux/session_info.h"

namespace gpumux {

std::string FormatSessionsJson(const std::vector<SessionInfo>& sessions);
std::string FormatSessionsTable(const std::vector<SessionInfo>& sessions);

}  // namespace gpumux
