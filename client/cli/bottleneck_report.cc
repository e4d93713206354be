#include "client/cli/bottleneck_report.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli/text_table.h"
#include "common/formats/json_writer.h"

namespace gpumux {
namespace {

// What the text and the JSON both show, computed once from the Profile.

struct DeviceRow {
  std::string name;
  uint64_t calls = 0;
  int64_t host_ns = 0;
  int64_t device_ns = 0;
};

struct NvtxRow {
  const NvtxRangeRecord* range;
  int64_t host_ns = 0;
  int64_t device_ns = 0;
  uint64_t work = 0;
  bool open = false;
};

int64_t DeviceTime(const DeviceWorkRecord& record) {
  if (record.device_start_ns < 0) return 0;
  return std::max<int64_t>(0, record.device_end_ns - record.device_start_ns);
}

bool Measured(const DeviceWorkRecord& record) { return record.device_start_ns >= 0; }

// cProfile's order for "tottime": internal time descending, then by name so
// that the report does not depend on the library's function numbering.
std::vector<const HostFunction*> CalledFunctions(const Profile& profile) {
  std::vector<const HostFunction*> called;
  for (const HostFunction& function : profile.host.functions) {
    if (function.calls > 0) called.push_back(&function);
  }
  std::sort(called.begin(), called.end(), [](const HostFunction* a, const HostFunction* b) {
    if (a->self_ns != b->self_ns) return a->self_ns > b->self_ns;
    return a->name < b->name;
  });
  return called;
}

// key_averages() over the work's names, by device total descending.
std::vector<DeviceRow> DeviceRows(const Profile& profile) {
  std::map<std::string, DeviceRow> by_name;
  for (const DeviceWorkRecord& record : profile.device.work) {
    DeviceRow& row = by_name[record.name];
    row.name = record.name;
    ++row.calls;
    row.host_ns += std::max<int64_t>(0, record.host_end_ns - record.host_start_ns);
    row.device_ns += DeviceTime(record);
  }
  std::vector<DeviceRow> rows;
  for (auto& [name, row] : by_name) rows.push_back(std::move(row));
  // by_name was sorted by name and stable_sort keeps that order among ties.
  std::stable_sort(rows.begin(), rows.end(), [](const DeviceRow& a, const DeviceRow& b) {
    return a.device_ns > b.device_ns;
  });
  return rows;
}

// Ranges grouped by session (so that depth indentation reads as a tree),
// each with the work its session queued while it was open. Work is looked up
// by binary search on the session's records sorted by host start.
std::vector<NvtxRow> NvtxRows(const Profile& profile) {
  struct SessionWork {
    std::vector<int64_t> starts;
    std::vector<int64_t> device_prefix;  // device_prefix[i]: sum over the first i
  };
  std::map<uint64_t, std::vector<std::pair<int64_t, int64_t>>> work_by_session;
  for (const DeviceWorkRecord& record : profile.device.work) {
    work_by_session[record.session].emplace_back(record.host_start_ns, DeviceTime(record));
  }
  std::map<uint64_t, SessionWork> sessions;
  for (auto& [session, work] : work_by_session) {
    std::sort(work.begin(), work.end());
    SessionWork& indexed = sessions[session];
    indexed.device_prefix.push_back(0);
    for (const auto& [start, device_ns] : work) {
      indexed.starts.push_back(start);
      indexed.device_prefix.push_back(indexed.device_prefix.back() + device_ns);
    }
  }

  std::vector<NvtxRow> rows;
  for (const NvtxRangeRecord& range : profile.device.ranges) {
    NvtxRow row{&range};
    row.open = range.end_ns < 0;
    const int64_t end_ns = row.open ? profile.host.end_ns : range.end_ns;
    row.host_ns = std::max<int64_t>(0, end_ns - range.start_ns);
    auto it = sessions.find(range.session);
    if (it != sessions.end()) {
      const SessionWork& work = it->second;
      const auto first = std::lower_bound(work.starts.begin(), work.starts.end(), range.start_ns);
      const auto last =
          std::lower_bound(first, work.starts.end(), std::max(end_ns, range.start_ns));
      row.work = static_cast<uint64_t>(last - first);
      row.device_ns = work.device_prefix[static_cast<size_t>(last - work.starts.begin())] -
                      work.device_prefix[static_cast<size_t>(first - work.starts.begin())];
    }
    rows.push_back(row);
  }
  std::stable_sort(rows.begin(), rows.end(), [](const NvtxRow& a, const NvtxRow& b) {
    if (a.range->session != b.range->session) return a.range->session < b.range->session;
    if (a.range->start_ns != b.range->start_ns) return a.range->start_ns < b.range->start_ns;
    return a.range->depth < b.range->depth;
  });
  return rows;
}

std::vector<std::string> Caveats(const Profile& profile) {
  std::vector<std::string> caveats = {
      "Device work is asynchronous: a call that queues work returns before the work runs, so the "
      "host view counts only the time to queue it, while the device view measures the work on its "
      "stream; a call that waits (synchronize, a copy to the host, wait=true) shows the device's "
      "time as its own.",
      "The first calls pay for start-up: opening the session, mapping each segment the first "
      "time, and on CUDA creating the context and loading modules; the trace shows whether they "
      "dominate.",
      "Profiling costs time: each libgpumux call records a span and each piece of device work is "
      "timed on its stream; the figures include that cost.",
  };
  const HostProfile& host = profile.host;
  const DeviceProfile& device = profile.device;
  if (host.dropped_calls > 0 || device.dropped_work > 0 || device.dropped_ranges > 0) {
    caveats.push_back(absl::StrCat(
        host.dropped_calls, " host spans, ", device.dropped_work, " device records and ",
        device.dropped_ranges,
        " NVTX ranges were dropped: the rings were full. The host view's counts and times are "
        "exact all the same; the device view and the trace miss what was dropped."));
  }
  return caveats;
}

const char* KindName(Verdict::Kind kind) {
  switch (kind) {
    case Verdict::Kind::kHostBound:
      return "host-bound";
    case Verdict::Kind::kDeviceBound:
      return "device-bound";
    case Verdict::Kind::kBalanced:
      return "balanced";
  }
  return "host-bound";
}

// ---- Text ----

// The autograd profiler's _format_time, from nanoseconds.
std::string FormatTime(double ns) {
  const double us = ns / 1000.0;
  if (us >= 1e6) return absl::StrFormat("%.3fs", us / 1e6);
  if (us >= 1e3) return absl::StrFormat("%.3fms", us / 1e3);
  return absl::StrFormat("%.3fus", us);
}

// The autograd profiler's _format_time_share.
std::string FormatShare(double part, double whole) {
  if (whole == 0) return "NaN";
  return absl::StrFormat("%.2f%%", part * 100.0 / whole);
}

void AppendFrame(absl::string_view title, std::string& out) {
  const std::string rule(80, '-');
  absl::StrAppend(&out, "\n", rule, "\n  ", title, "\n", rule, "\n");
}

void AppendEnvironment(const ProfileEnvironment& env, std::string& out) {
  AppendFrame("Environment Summary", out);
  absl::StrAppend(&out, "gpumux ", env.gpumux_version, " ", env.build_type, ", ", env.compiler,
                  "\n");
  absl::StrAppend(&out, "gpumuxd ", env.daemon_version, ", backend ", env.backend, "\n");
  absl::StrAppend(&out, "Devices:\n");
  if (env.devices.empty()) absl::StrAppend(&out, "  none\n");
  for (const std::string& device : env.devices) absl::StrAppend(&out, "  ", device, "\n");
  absl::StrAppend(&out, "OS: ", env.os, "\n");
}

void AppendProgram(const Profile& profile, std::string& out) {
  AppendFrame("Program", out);
  absl::StrAppend(&out, profile.program, profile.exit.empty() ? "" : ": ", profile.exit, "\n");
  const HostProfile& host = profile.host;
  absl::StrAppend(&out, "wall time ", FormatTime(profile.wall_ns), ", in libgpumux ",
                  FormatTime(host.library_ns), " (", FormatShare(host.library_ns, profile.wall_ns),
                  ") on ", host.threads, " thread(s), of which waiting for the device ",
                  FormatTime(host.waiting_ns), "\n");
}

// pstats.Stats.print_stats(top) after sort_stats("tottime"), with the
// function's name where cProfile prints filename:lineno(function).
void AppendHostView(const Profile& profile, int top, std::string& out) {
  AppendFrame("Host view (libgpumux calls)", out);
  const std::vector<const HostFunction*> called = CalledFunctions(profile);
  uint64_t total_calls = 0;
  for (const HostFunction* function : called) total_calls += function->calls;
  absl::StrAppendFormat(&out, "         %d function calls in %.3f seconds\n", total_calls,
                        profile.host.library_ns / 1e9);
  if (called.empty()) return;
  const size_t shown = std::min(called.size(), static_cast<size_t>(std::max(top, 0)));
  absl::StrAppend(&out, "\n   Ordered by: internal time\n");
  if (shown < called.size()) {
    absl::StrAppendFormat(&out, "   List reduced from %d to %d due to restriction <%d>\n",
                          called.size(), shown, top);
  }
  absl::StrAppend(&out, "\n   ncalls  tottime  percall  cumtime  percall function\n");
  for (size_t i = 0; i < shown; ++i) {
    const HostFunction& function = *called[i];
    const double calls = static_cast<double>(function.calls);
    const double tottime = function.self_ns / 1e9;
    const double cumtime = function.total_ns / 1e9;
    absl::StrAppendFormat(&out, "%9d %8.3f %8.3f %8.3f %8.3f %s\n", function.calls, tottime,
                          tottime / calls, cumtime, cumtime / calls, function.name);
  }
}

// The row of autograd's _build_table: every column, Name included (PyTorch's
// add_column defaults to "{: >width}"), right-aligned in its width and
// followed by two spaces. Trailing spaces are dropped, as the CLI's other
// tables drop them.
std::string TableLine(const std::vector<std::string>& cells, const std::vector<size_t>& widths) {
  std::string line;
  for (size_t c = 0; c < cells.size(); ++c) {
    if (cells[c].size() < widths[c]) line.append(widths[c] - cells[c].size(), ' ');
    absl::StrAppend(&line, cells[c], "  ");
  }
  line.erase(line.find_last_not_of(' ') + 1);
  return absl::StrCat(line, "\n");
}

// key_averages().table(sort_by="<device>_time_total", row_limit=top): widths,
// shares and totals over every row, the first `top` rows printed.
void AppendDeviceView(const Profile& profile, const ReportOptions& options, std::string& out) {
  AppendFrame("Device view (work the daemon ran)", out);
  const std::string& label = options.device_label;
  const std::vector<DeviceRow> rows = DeviceRows(profile);
  if (rows.empty()) {
    absl::StrAppend(&out, "  no device work was recorded\n");
  } else {
    constexpr size_t kMaxNameWidth = 55;
    size_t name_width = 0;
    double host_sum = 0;
    double device_sum = 0;
    for (const DeviceRow& row : rows) {
      name_width = std::max(name_width, row.name.size() + 4);
      host_sum += static_cast<double>(row.host_ns);
      device_sum += static_cast<double>(row.device_ns);
    }
    name_width = std::min(name_width, kMaxNameWidth);
    const std::vector<std::string> headers = {"Name",
                                              "Self Host %",
                                              "Self Host",
                                              "Host total %",
                                              "Host total",
                                              "Host time avg",
                                              absl::StrCat("Self ", label),
                                              absl::StrCat("Self ", label, " %"),
                                              absl::StrCat(label, " total"),
                                              absl::StrCat(label, " time avg"),
                                              "# of Calls"};
    // PyTorch's columns are 12 wide and "CUDA time avg" overflows its own,
    // shifting the header off its rows; here a column widens to its header.
    std::vector<size_t> widths;
    std::vector<std::string> separator;
    for (const std::string& header : headers) {
      widths.push_back(widths.empty() ? name_width : std::max<size_t>(12, header.size()));
      separator.push_back(std::string(widths.back(), '-'));
    }
    const std::string rule = TableLine(separator, widths);
    absl::StrAppend(&out, "        top ", options.top, " work names sorted by ", label, " total\n");
    absl::StrAppend(&out, rule, TableLine(headers, widths), rule);
    const size_t shown = std::min(rows.size(), static_cast<size_t>(std::max(options.top, 0)));
    for (size_t i = 0; i < shown; ++i) {
      const DeviceRow& row = rows[i];
      std::string name = row.name;
      if (name.size() >= kMaxNameWidth - 3)
        name = absl::StrCat(name.substr(0, kMaxNameWidth - 3), "...");
      const double calls = static_cast<double>(row.calls);
      const double host = static_cast<double>(row.host_ns);
      const double device = static_cast<double>(row.device_ns);
      absl::StrAppend(
          &out, TableLine({name, FormatShare(host, host_sum), FormatTime(host),
                           FormatShare(host, host_sum), FormatTime(host), FormatTime(host / calls),
                           FormatTime(device), FormatShare(device, device_sum), FormatTime(device),
                           FormatTime(device / calls), absl::StrCat(row.calls)},
                          widths));
    }
    absl::StrAppend(&out, rule, "Self Host time total: ", FormatTime(host_sum), "\n");
    absl::StrAppend(&out, "Self ", label, " time total: ", FormatTime(device_sum), "\n");
  }
  if (profile.device.dropped_work > 0) {
    absl::StrAppend(&out, profile.device.dropped_work,
                    " device records were dropped (the daemon's ring was full); the table misses "
                    "them.\n");
  }
}

void AppendNvtx(const Profile& profile, std::string& out) {
  AppendFrame("NVTX ranges", out);
  const std::vector<NvtxRow> rows = NvtxRows(profile);
  if (rows.empty()) {
    absl::StrAppend(&out, "  no NVTX ranges were opened\n");
    return;
  }
  TextTable table({"Range", "Session", "Host time", "Device time", "Work"});
  for (size_t c = 1; c < 5; ++c) table.AlignRight(c);
  for (const NvtxRow& row : rows) {
    table.AddRow({absl::StrCat(std::string(2 * row.range->depth, ' '), row.range->message),
                  absl::StrCat(row.range->session),
                  absl::StrCat(FormatTime(row.host_ns), row.open ? " (open)" : ""),
                  FormatTime(row.device_ns), absl::StrCat(row.work)});
  }
  absl::StrAppend(&out, table.Render());
}

void AppendVerdict(const Profile& profile, std::string& out) {
  AppendFrame("Verdict", out);
  const Verdict verdict = ComputeVerdict(profile);
  const std::string totals =
      absl::StrCat("the device was busy ", FormatTime(verdict.device_ns),
                   " and the host (outside waits for the device) ", FormatTime(verdict.host_ns),
                   " of the program's ", FormatTime(profile.wall_ns), " wall time");
  const double pct = std::abs(verdict.pct_diff) * 100.0;
  switch (verdict.kind) {
    case Verdict::Kind::kDeviceBound:
      absl::StrAppendFormat(&out,
                            "Device-bound: %s; the host's total is %.2f%% below the device's. "
                            "Shorter or fewer pieces of device work shorten the run first.\n",
                            totals, pct);
      break;
    case Verdict::Kind::kHostBound:
      if (verdict.device_ns == 0) {
        absl::StrAppend(&out, "Host-bound: ", totals, "; no device work was measured.\n");
      } else {
        absl::StrAppendFormat(&out,
                              "Host-bound: %s; the host's total is %.2f%% above the device's. "
                              "The program's own work and the calls that queue work come "
                              "first.\n",
                              totals, pct);
      }
      break;
    case Verdict::Kind::kBalanced:
      absl::StrAppendFormat(&out,
                            "Balanced: %s; the two are within 5%% of each other (%.2f%% of the "
                            "device's total apart).\n",
                            totals, pct);
      break;
  }
}

// ---- JSON ----

void WriteHost(const Profile& profile, JsonWriter& json) {
  const HostProfile& host = profile.host;
  json.BeginObject();
  json.Key("library_ns");
  json.Int(host.library_ns);
  json.Key("waiting_ns");
  json.Int(host.waiting_ns);
  json.Key("threads");
  json.Uint(host.threads);
  json.Key("dropped_calls");
  json.Uint(host.dropped_calls);
  json.Key("functions");
  json.BeginArray();
  for (const HostFunction* function : CalledFunctions(profile)) {
    json.BeginObject();
    json.Key("name");
    json.String(function->name);
    json.Key("calls");
    json.Uint(function->calls);
    json.Key("self_ns");
    json.Int(function->self_ns);
    json.Key("total_ns");
    json.Int(function->total_ns);
    json.EndObject();
  }
  json.EndArray();
  json.EndObject();
}

void WriteDevice(const Profile& profile, JsonWriter& json) {
  json.BeginObject();
  json.Key("rows");
  json.BeginArray();
  for (const DeviceRow& row : DeviceRows(profile)) {
    json.BeginObject();
    json.Key("name");
    json.String(row.name);
    json.Key("calls");
    json.Uint(row.calls);
    json.Key("host_ns");
    json.Int(row.host_ns);
    json.Key("device_ns");
    json.Int(row.device_ns);
    json.EndObject();
  }
  json.EndArray();
  json.Key("dropped_work");
  json.Uint(profile.device.dropped_work);
  json.Key("dropped_ranges");
  json.Uint(profile.device.dropped_ranges);
  json.EndObject();
}

void WriteEnvironment(const ProfileEnvironment& env, JsonWriter& json) {
  json.BeginObject();
  const std::pair<const char*, const std::string*> fields[] = {
      {"gpumux_version", &env.gpumux_version},
      {"daemon_version", &env.daemon_version},
      {"build_type", &env.build_type},
      {"compiler", &env.compiler},
      {"os", &env.os},
      {"backend", &env.backend}};
  for (const auto& [key, value] : fields) {
    json.Key(key);
    json.String(*value);
  }
  json.Key("devices");
  json.BeginArray();
  for (const std::string& device : env.devices) json.String(device);
  json.EndArray();
  json.EndObject();
}

// ---- Chrome trace ----

constexpr int64_t kHostPid = 1;
constexpr int64_t kNvtxPid = 2;
constexpr int64_t kDaemonPid = 99;
constexpr int64_t kDevicePidBase = 100;

// Writes trace events and remembers the processes and threads they used, so
// that their names can follow as metadata events.
class TraceWriter {
 public:
  explicit TraceWriter(int64_t origin_ns) : origin_ns_(origin_ns) {}

  JsonWriter& json() { return json_; }

  // Opens an event object with the fields every event has; the caller adds
  // its own and closes it.
  void BeginEvent(absl::string_view name, absl::string_view ph, absl::string_view cat, int64_t pid,
                  int64_t tid, int64_t ts_ns) {
    json_.BeginObject();
    json_.Key("name");
    json_.String(name);
    json_.Key("ph");
    json_.String(ph);
    json_.Key("cat");
    json_.String(cat);
    json_.Key("pid");
    json_.Int(pid);
    json_.Key("tid");
    json_.Int(tid);
    json_.Key("ts");
    json_.Double(Micros(ts_ns - origin_ns_));
  }

  void Duration(int64_t dur_ns) {
    json_.Key("dur");
    json_.Double(Micros(std::max<int64_t>(0, dur_ns)));
  }

  void NameProcess(int64_t pid, std::string name) { processes_.emplace(pid, std::move(name)); }
  void NameThread(int64_t pid, int64_t tid, std::string name) {
    threads_.emplace(std::make_pair(pid, tid), std::move(name));
  }

  void WriteMetadata() {
    for (const auto& [pid, name] : processes_) WriteName("process_name", pid, 0, name);
    for (const auto& [key, name] : threads_) WriteName("thread_name", key.first, key.second, name);
  }

  static double Micros(int64_t ns) { return static_cast<double>(ns) / 1000.0; }

 private:
  void WriteName(absl::string_view kind, int64_t pid, int64_t tid, absl::string_view name) {
    json_.BeginObject();
    json_.Key("name");
    json_.String(kind);
    json_.Key("ph");
    json_.String("M");
    json_.Key("pid");
    json_.Int(pid);
    json_.Key("tid");
    json_.Int(tid);
    json_.Key("args");
    json_.BeginObject();
    json_.Key("name");
    json_.String(name);
    json_.EndObject();
    json_.EndObject();
  }

  int64_t origin_ns_;
  JsonWriter json_;
  std::map<int64_t, std::string> processes_;
  std::map<std::pair<int64_t, int64_t>, std::string> threads_;
};

int64_t TraceOrigin(const Profile& profile) {
  int64_t origin = profile.host.start_ns;
  for (const HostCall& call : profile.host.calls) origin = std::min(origin, call.start_ns);
  for (const DeviceWorkRecord& record : profile.device.work) {
    origin = std::min(origin, record.host_start_ns);
    if (Measured(record)) origin = std::min(origin, record.device_start_ns);
  }
  for (const NvtxRangeRecord& range : profile.device.ranges) {
    origin = std::min(origin, range.start_ns);
  }
  return origin;
}

std::string FunctionName(const HostProfile& host, uint32_t function) {
  if (function < host.functions.size()) return host.functions[function].name;
  return absl::StrCat("function ", function);
}

void WriteHostCalls(const Profile& profile, TraceWriter& trace) {
  std::vector<const HostCall*> calls;
  for (const HostCall& call : profile.host.calls) calls.push_back(&call);
  // Parents before their children on each thread, as the viewers nest them.
  std::sort(calls.begin(), calls.end(), [](const HostCall* a, const HostCall* b) {
    if (a->thread != b->thread) return a->thread < b->thread;
    if (a->start_ns != b->start_ns) return a->start_ns < b->start_ns;
    return a->end_ns - a->start_ns > b->end_ns - b->start_ns;
  });
  trace.NameProcess(kHostPid, absl::StrCat("host: ", profile.program));
  for (const HostCall* call : calls) {
    trace.NameThread(kHostPid, call->thread, absl::StrCat("thread ", call->thread));
    trace.BeginEvent(FunctionName(profile.host, call->function), "X", "host", kHostPid,
                     call->thread, call->start_ns);
    trace.Duration(call->end_ns - call->start_ns);
    trace.json().Key("args");
    trace.json().BeginObject();
    trace.json().Key("call_id");
    trace.json().Uint(call->call_id);
    trace.json().EndObject();
    trace.json().EndObject();
  }
}

void WriteNvtxRanges(const Profile& profile, TraceWriter& trace) {
  std::vector<const NvtxRangeRecord*> ranges;
  for (const NvtxRangeRecord& range : profile.device.ranges) ranges.push_back(&range);
  std::stable_sort(ranges.begin(), ranges.end(),
                   [](const NvtxRangeRecord* a, const NvtxRangeRecord* b) {
                     if (a->session != b->session) return a->session < b->session;
                     if (a->thread != b->thread) return a->thread < b->thread;
                     if (a->start_ns != b->start_ns) return a->start_ns < b->start_ns;
                     return a->depth < b->depth;
                   });
  if (!ranges.empty()) trace.NameProcess(kNvtxPid, "NVTX ranges");
  // One lane per thread of each session: ranges nest per thread.
  std::map<std::pair<uint64_t, uint64_t>, int64_t> lanes;
  for (const NvtxRangeRecord* range : ranges) {
    const auto [lane, added] =
        lanes.try_emplace({range->session, range->thread}, static_cast<int64_t>(lanes.size()) + 1);
    const int64_t tid = lane->second;
    const bool open = range->end_ns < 0;
    if (added) {
      trace.NameThread(kNvtxPid, tid,
                       range->thread == 0  // a caller that did not name its thread
                           ? absl::StrCat("session ", range->session)
                           : absl::StrCat("session ", range->session, " thread ", range->thread));
    }
    trace.BeginEvent(range->message, "X", "nvtx", kNvtxPid, tid, range->start_ns);
    trace.Duration((open ? profile.host.end_ns : range->end_ns) - range->start_ns);
    trace.json().Key("args");
    trace.json().BeginObject();
    trace.json().Key("depth");
    trace.json().Uint(range->depth);
    trace.json().Key("open");
    trace.json().Bool(open);
    trace.json().EndObject();
    trace.json().EndObject();
  }
}

void WriteWorkArgs(const DeviceWorkRecord& record, JsonWriter& json) {
  json.Key("args");
  json.BeginObject();
  json.Key("session");
  json.Uint(record.session);
  json.Key("stream");
  json.Uint(record.stream);
  json.Key("bytes");
  json.Uint(record.bytes);
  json.Key("call_id");
  json.Uint(record.call_id);
  json.Key("host_us");
  json.Double(TraceWriter::Micros(record.host_end_ns - record.host_start_ns));
  json.EndObject();
}

// Device work, then a flow from each host call to the work it queued.
void WriteDeviceWork(const Profile& profile, TraceWriter& trace) {
  std::map<std::pair<uint64_t, uint64_t>, int64_t> stream_tids;  // (session, stream) -> tid
  struct Flow {
    const HostCall* call;
    int64_t pid, tid, ts_ns;
  };
  std::map<uint64_t, const HostCall*> calls_by_id;
  for (const HostCall& call : profile.host.calls) calls_by_id.emplace(call.call_id, &call);
  std::vector<Flow> flows;

  for (const DeviceWorkRecord& record : profile.device.work) {
    if (!Measured(record)) {
      const int64_t tid = static_cast<int64_t>(record.session);
      trace.NameProcess(kDaemonPid, "daemon");
      trace.NameThread(kDaemonPid, tid, absl::StrCat("session ", record.session));
      trace.BeginEvent(record.name, "i", "device", kDaemonPid, tid, record.host_start_ns);
      trace.json().Key("s");
      trace.json().String("t");
      WriteWorkArgs(record, trace.json());
      trace.json().EndObject();
      continue;
    }
    const int64_t pid = kDevicePidBase + record.device;
    const auto key = std::make_pair(record.session, record.stream);
    const int64_t tid =
        stream_tids.emplace(key, static_cast<int64_t>(stream_tids.size()) + 1).first->second;
    trace.NameProcess(pid, absl::StrCat("device ", record.device));
    trace.NameThread(pid, tid, absl::StrCat("session ", record.session, " stream ", record.stream));
    trace.BeginEvent(record.name, "X", "device", pid, tid, record.device_start_ns);
    trace.Duration(record.device_end_ns - record.device_start_ns);
    WriteWorkArgs(record, trace.json());
    trace.json().EndObject();
    auto call = calls_by_id.find(record.call_id);
    if (record.call_id != 0 && call != calls_by_id.end()) {
      flows.push_back({call->second, pid, tid, record.device_start_ns});
    }
  }

  int64_t id = 0;
  for (const Flow& flow : flows) {
    ++id;
    trace.BeginEvent("queued", "s", "call", kHostPid, flow.call->thread, flow.call->start_ns);
    trace.json().Key("id");
    trace.json().Int(id);
    trace.json().EndObject();
    // "bp": "e" binds the arrow's head to the device slice that starts there.
    trace.BeginEvent("queued", "f", "call", flow.pid, flow.tid, flow.ts_ns);
    trace.json().Key("bp");
    trace.json().String("e");
    trace.json().Key("id");
    trace.json().Int(id);
    trace.json().EndObject();
  }
}

}  // namespace

Verdict ComputeVerdict(const Profile& profile) {
  Verdict verdict;
  verdict.host_ns = std::max<int64_t>(0, profile.wall_ns - profile.host.waiting_ns);

  std::vector<std::pair<int64_t, int64_t>> intervals;
  for (const DeviceWorkRecord& record : profile.device.work) {
    if (DeviceTime(record) > 0)
      intervals.emplace_back(record.device_start_ns, record.device_end_ns);
  }
  std::sort(intervals.begin(), intervals.end());
  int64_t covered_end = std::numeric_limits<int64_t>::min();
  for (const auto& [start, end] : intervals) {
    if (end <= covered_end) continue;
    verdict.device_ns += end - std::max(start, covered_end);
    covered_end = end;
  }

  if (verdict.device_ns == 0) {
    verdict.kind = Verdict::Kind::kHostBound;
    return verdict;
  }
  verdict.pct_diff = static_cast<double>(verdict.device_ns - verdict.host_ns) /
                     static_cast<double>(verdict.device_ns);
  if (std::abs(verdict.pct_diff) <= 0.05) {
    verdict.kind = Verdict::Kind::kBalanced;
  } else if (verdict.device_ns > verdict.host_ns) {
    verdict.kind = Verdict::Kind::kDeviceBound;
  } else {
    verdict.kind = Verdict::Kind::kHostBound;
  }
  return verdict;
}

std::string FormatBottleneckText(const Profile& profile, const ReportOptions& options) {
  std::string out =
      "`gpumux bottleneck` is a tool that can be used as an initial step for debugging "
      "bottlenecks in your program. It summarizes a run of your program with libgpumux's "
      "profiler (every call the program made into the client library: the host side) and the "
      "daemon's records of the work it ran for the program (the device side). Because your "
      "program will be profiled, please ensure that it exits in a finite amount of time.\n";
  AppendEnvironment(profile.environment, out);
  AppendProgram(profile, out);
  AppendHostView(profile, options.top, out);
  AppendDeviceView(profile, options, out);
  AppendNvtx(profile, out);
  AppendVerdict(profile, out);
  AppendFrame("Caveats", out);
  const std::vector<std::string> caveats = Caveats(profile);
  for (size_t i = 0; i < caveats.size(); ++i) absl::StrAppend(&out, i + 1, ". ", caveats[i], "\n");
  return out;
}

// The JSON holds every row: the options' top limit and label are the text's.
std::string FormatBottleneckJson(const Profile& profile, const ReportOptions& /*options*/) {
  JsonWriter json;
  json.BeginObject();
  json.Key("environment");
  WriteEnvironment(profile.environment, json);
  json.Key("program");
  json.String(profile.program);
  json.Key("exit");
  json.String(profile.exit);
  json.Key("wall_ns");
  json.Int(profile.wall_ns);
  json.Key("host");
  WriteHost(profile, json);
  json.Key("device");
  WriteDevice(profile, json);

  json.Key("nvtx");
  json.BeginArray();
  for (const NvtxRow& row : NvtxRows(profile)) {
    json.BeginObject();
    json.Key("message");
    json.String(row.range->message);
    json.Key("session");
    json.Uint(row.range->session);
    json.Key("depth");
    json.Uint(row.range->depth);
    json.Key("host_ns");
    json.Int(row.host_ns);
    json.Key("device_ns");
    json.Int(row.device_ns);
    json.Key("work");
    json.Uint(row.work);
    json.Key("open");
    json.Bool(row.open);
    json.EndObject();
  }
  json.EndArray();

  const Verdict verdict = ComputeVerdict(profile);
  json.Key("verdict");
  json.BeginObject();
  json.Key("kind");
  json.String(KindName(verdict.kind));
  json.Key("host_ns");
  json.Int(verdict.host_ns);
  json.Key("device_ns");
  json.Int(verdict.device_ns);
  json.Key("pct_diff");
  json.Double(verdict.pct_diff);
  json.EndObject();

  json.Key("caveats");
  json.BeginArray();
  for (const std::string& caveat : Caveats(profile)) json.String(caveat);
  json.EndArray();
  json.EndObject();
  return absl::StrCat(json.str(), "\n");
}

std::string FormatChromeTrace(const Profile& profile) {
  TraceWriter trace(TraceOrigin(profile));
  JsonWriter& json = trace.json();
  json.BeginObject();
  json.Key("traceEvents");
  json.BeginArray();
  WriteHostCalls(profile, trace);
  WriteNvtxRanges(profile, trace);
  WriteDeviceWork(profile, trace);
  trace.WriteMetadata();
  json.EndArray();
  json.Key("displayTimeUnit");
  json.String("ms");
  json.EndObject();
  return absl::StrCat(json.str(), "\n");
}

}  // namespace gpumux
