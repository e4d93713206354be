#pragma once

// The `gpumux` subcommands. Each parses its own arguments (global flags are
// already taken out), prints to the context's streams and returns the exit
// code: 0 done, 1 failed (the message on stderr), 2 bad usage.

#include <string>
#include <vector>

#include "client/cli/command.h"

namespace gpumux {

// Usage lines, one per command, for the global usage text.
inline constexpr char kDevicesUsage[] = "gpumux devices [--json]\n";
inline constexpr char kStatsUsage[] = "gpumux stats [--device N] [--session ID] [--json]\n";
inline constexpr char kSummaryUsage[] =
    "gpumux summary [--device N] [--session ID] [--abbreviated]\n";
inline constexpr char kSnapshotUsage[] = "gpumux snapshot [--device N] [--session ID] [--json]\n";
inline constexpr char kSessionsUsage[] = "gpumux sessions [--json]\n";
inline constexpr char kGroupsUsage[] = "gpumux groups [--json]\n";
inline constexpr char kEmptyCacheUsage[] = "gpumux empty-cache [--device N]\n";
inline constexpr char kTenantsUsage[] = "gpumux tenants [--json]\n";
inline constexpr char kTenantLimitUsage[] = "gpumux tenant-limit TENANT SIZE|none [--device N]\n";
inline constexpr char kKillSessionUsage[] = "gpumux kill-session ID [--reason TEXT]\n";
inline constexpr char kHealthUsage[] = "gpumux health\n";
inline constexpr char kTopUsage[] = "gpumux top [--interval SECONDS] [--once]\n";
inline constexpr char kBottleneckUsage[] =
    "gpumux bottleneck [--top N] [--json] [--trace FILE] [--ring N] -- PROGRAM [ARGS...]\n";
inline constexpr char kProfileUsage[] =
    "gpumux profile --session ID --duration SECONDS [--top N] [--json] [--trace FILE] [--ring "
    "N]\n";
inline constexpr char kReplayUsage[] =
    "gpumux replay TRACE.csv.gz [--address A] [--repeat N] [--device N]\n"
    "              [--allocator-conf TEXT] [--emulate-gpu-lag DURATION|Nops]\n";

// Runs a program with libgpumux's profiler on and reports where its time
// went, host side and device side (torch.utils.bottleneck's report).
int RunBottleneck(const CommandContext& context, const std::vector<std::string>& args);
// The same report for a live session over a window (Admin.ProfileSession
// for an administrator, else Profile.ProfileSession).
int RunProfile(const CommandContext& context, const std::vector<std::string>& args);
// Device.ListDevices.
int RunDevices(const CommandContext& context, const std::vector<std::string>& args);
// Observe.GetMemoryStats of a device, or of one session on it.
int RunStats(const CommandContext& context, const std::vector<std::string>& args);
// Observe.GetMemorySummary, printed as is.
int RunSummary(const CommandContext& context, const std::vector<std::string>& args);
// Observe.GetMemorySnapshot of every device, or of one.
int RunSnapshot(const CommandContext& context, const std::vector<std::string>& args);
// Observe.ListSessions.
int RunSessions(const CommandContext& context, const std::vector<std::string>& args);
// Group.ListGroups: the groups of daemons the daemon is in.
int RunGroups(const CommandContext& context, const std::vector<std::string>& args);
// Opens a session and empties every session's cache (Memory.EmptyCache with
// all_sessions) on one device or all.
int RunEmptyCache(const CommandContext& context, const std::vector<std::string>& args);
// Admin.ListTenants: each tenant's limit, reserved and allocated bytes and
// sessions per device (root or gpumuxd's user only).
int RunTenants(const CommandContext& context, const std::vector<std::string>& args);
// Admin.SetTenantLimit on one device or all (root or gpumuxd's user only).
int RunTenantLimit(const CommandContext& context, const std::vector<std::string>& args);
// Admin.KillSession: ends a session as if its client had died (root or
// gpumuxd's user only).
int RunKillSession(const CommandContext& context, const std::vector<std::string>& args);
// grpc.health.v1 of every gpumux.v1 service served at the address, and each
// device's health; 0 only when all serve.
int RunHealth(const CommandContext& context, const std::vector<std::string>& args);
// A live view of the devices and the sessions by memory (Device, Observe).
int RunTop(const CommandContext& context, const std::vector<std::string>& args);
// Replays a PyTorch allocation trace in this process (no --address) or
// through the daemon at --address.
int RunReplay(const CommandContext& context, const std::vector<std::string>& args);

}  // namespace gpumux
