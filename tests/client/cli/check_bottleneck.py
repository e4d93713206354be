"""Checks a `gpumux bottleneck --json` report and its --trace file.

  check_bottleneck.py report REPORT.json MODE   (alloc, wait, crash, python, window)
  check_bottleneck.py trace TRACE.json

Exits 1 with the reason on stderr when a check fails.
"""
import json
import sys


def fail(message):
    sys.stderr.write("check_bottleneck: FAIL: %s\n" % message)
    sys.exit(1)


def expect(condition, message):
    if not condition:
        fail(message)


def calls(report):
    return {f["name"]: f["calls"] for f in report["host"]["functions"]}


def check_report(path, mode):
    with open(path) as f:
        report = json.load(f)
    host = calls(report)
    rows = report["device"]["rows"]
    device = {r["name"]: r for r in rows}
    verdict = report["verdict"]["kind"]
    if mode == "alloc":
        # The calls the program made, exactly.
        expect(host.get("memory::Allocate") == 1001, "Allocate calls: %s" % host)
        expect(host.get("DeviceBuffer::Reset") == 1001, "Reset calls: %s" % host)
        expect(host.get("copy::HostToDevice") == 1, "copy calls: %s" % host)
        expect(host.get("Stream::Synchronize") == 1, "synchronize calls: %s" % host)
        expect(host.get("Client::Connect") == 1, "connect calls: %s" % host)
        expect("Client::CurrentStream" in host and host["Client::CurrentStream"] == 1,
               "CurrentStream is called once by the program: %s" % host)
        expect(rows and rows[0]["name"] == "copy host_to_device", "device top row: %s" % rows)
        expect(sum(r["calls"] for r in rows if r["name"] == "copy host_to_device") >= 1,
               "copies: %s" % rows)
        expect(verdict == "host-bound", "verdict %s" % report["verdict"])
        expect(report["exit"] == "exited with status 0", "exit %r" % report["exit"])
    elif mode == "wait":
        top = report["host"]["functions"][0]["name"]
        expect(top == "Stream::Synchronize", "host top row %s" % top)
        expect(host.get("copy::Memset") == 20, "memset calls: %s" % host)
        expect(host.get("Stream::Synchronize") == 20, "synchronize calls: %s" % host)
        expect(rows and rows[0]["name"] == "memset" and rows[0]["calls"] == 20,
               "device top row: %s" % rows)
        expect(rows[0]["device_ns"] > 0, "memset device time: %s" % rows[0])
        expect(verdict == "device-bound", "verdict %s" % report["verdict"])
        expect(report["host"]["waiting_ns"] > 0, "waiting: %s" % report["host"])
    elif mode == "crash":
        expect(report["exit"] == "killed by signal 6 (Aborted)", "exit %r" % report["exit"])
        expect(host.get("memory::Allocate") == 5, "Allocate calls: %s" % host)
        expect(host.get("nvtx::RangePush") == 1, "range push: %s" % host)
        expect("memset" in device and device["memset"]["calls"] == 1, "memset: %s" % rows)
        ranges = report["nvtx"]
        expect(len(ranges) == 1 and ranges[0]["message"] == "before the crash" and
               ranges[0]["open"] and ranges[0]["work"] >= 1, "ranges: %s" % ranges)
    elif mode == "python":
        # tests/client/cli/bottleneck_program.py through the Python package:
        # its libgpumux records the calls the module functions made.
        # The package tries the client's cache first with the GIL held, then
        # allocates without it on a miss; the buffers are freed at exit.
        expect(host.get("memory::TryAllocateCached") == 30, "cache tries: %s" % host)
        expect(1 <= host.get("memory::Allocate", 0) <= 30, "Allocate calls: %s" % host)
        expect(host.get("memory::TryFree") == 30, "frees: %s" % host)
        expect(host.get("copy::Memset") == 3, "memset calls: %s" % host)
        expect("memset" in device and device["memset"]["calls"] == 3, "device: %s" % rows)
        expect(report["exit"] == "exited with status 0", "exit %r" % report["exit"])
    elif mode == "window":
        # Only what ran in the window: the program connected and allocated
        # before it.
        expect("Client::Connect" not in host and "memory::Allocate" not in host,
               "calls from before the window: %s" % host)
        expect(host.get("copy::Memset", 0) >= 5, "memsets in 2 s: %s" % host)
        expect(host.get("Stream::Synchronize", 0) >= 5, "synchronizes in 2 s: %s" % host)
        expect("memset" in device and device["memset"]["calls"] >= 5, "device: %s" % rows)
        expect(abs(device["memset"]["calls"] - host["copy::Memset"]) <= 1,
               "device and host memsets: %s %s" % (rows, host))
        expect(1.5e9 <= report["wall_ns"] <= 6e9, "window %s ns" % report["wall_ns"])
    else:
        fail("unknown mode " + mode)


def check_trace(path):
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    expect(events, "no events")
    named = set()
    for e in events:
        for field in ("name", "ph", "pid", "tid"):
            expect(field in e, "event without %s: %s" % (field, e))
        if e["ph"] == "M":
            expect("args" in e and "name" in e["args"], "metadata without a name: %s" % e)
            named.add((e["pid"], e["tid"] if e["name"] == "thread_name" else None))
            continue
        expect(isinstance(e.get("ts"), (int, float)) and e["ts"] >= 0, "bad ts: %s" % e)
        if e["ph"] == "X":
            expect(isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0, "bad dur: %s" % e)
    # Complete events nest on each thread.
    tracks = {}
    for e in events:
        if e["ph"] == "X":
            tracks.setdefault((e["pid"], e["tid"]), []).append(e)
    for track, spans in tracks.items():
        expect((track[0], track[1]) in named, "track %s has no thread_name" % (track,))
        spans.sort(key=lambda e: (e["ts"], -e["dur"]))
        open_ends = []
        for e in spans:
            end = e["ts"] + e["dur"]
            while open_ends and open_ends[-1] <= e["ts"] + 1e-3:
                open_ends.pop()
            if open_ends:
                expect(end <= open_ends[-1] + 1e-3, "spans overlap on %s: %s" % (track, e))
            open_ends.append(end)
    # Flows join a host call to device work it queued.
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    expect(starts, "no flow arrows")
    expect(set(starts) == set(ends), "unpaired flows")
    host = {(e["tid"], e["ts"]) for e in events if e["ph"] == "X" and e["pid"] == 1}
    device = {(e["pid"], e["tid"], e["ts"]) for e in events if e["ph"] == "X" and e["pid"] >= 100}
    for flow, s in starts.items():
        f = ends[flow]
        expect(s["pid"] == 1 and (s["tid"], s["ts"]) in host, "flow %s starts off a call" % flow)
        expect((f["pid"], f["tid"], f["ts"]) in device, "flow %s ends off device work" % flow)
        expect(f["ts"] >= s["ts"], "flow %s goes back in time" % flow)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "report":
        check_report(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "trace":
        check_trace(sys.argv[2])
    else:
        fail("usage: check_bottleneck.py report FILE MODE | trace FILE")
