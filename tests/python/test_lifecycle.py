"""Lifetimes: what a killed Python process held comes back, dropped objects
are freed, and allocate/drop cycles leak nothing."""

import gc
import os
import signal
import subprocess
import sys
import time

import pytest

import gpumux
from conftest import observer_stats, wait_until

MiB = 1 << 20


def rss_bytes():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_a_sigkilled_process_gives_its_memory_back_within_a_second(daemon):
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import gpumux, sys\n"
         "held = [gpumux.allocate(64 << 20), gpumux.allocate(32 << 20, device=1),\n"
         "        gpumux.allocate(8 << 20, shareable=True), gpumux.Stream(), gpumux.Event(interprocess=True)]\n"
         "held[4].record()\n"
         "print('holding', flush=True)\n"
         "sys.stdin.read()\n"],
        env=daemon.env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "holding"
    assert observer_stats(daemon.address, 0)["allocated_bytes.all.current"] == 72 * MiB
    assert observer_stats(daemon.address, 1)["allocated_bytes.all.current"] == 32 * MiB
    child.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    child.wait()
    wait_until(lambda: observer_stats(daemon.address, 0)["reserved_bytes.all.current"] == 0
               and observer_stats(daemon.address, 1)["reserved_bytes.all.current"] == 0,
               1.0, "the killed process's memory is released")
    print(f"reclaimed in {(time.monotonic() - killed) * 1000:.1f} ms")
    assert gpumux.observe(daemon.address).list_sessions() == []


def test_buffers_keep_their_session_after_the_default_connection_is_dropped(daemon):
    buffer = gpumux.allocate(MiB)
    session = gpumux.default_client().session_id
    gpumux.set_default_client(None)
    gc.collect()
    ids = [s["session_id"] for s in gpumux.observe(daemon.address).list_sessions()]
    assert session in ids
    buffer.copy_from(b"still mapped")
    del buffer
    gc.collect()
    wait_until(lambda: session not in [s["session_id"] for s in gpumux.observe(daemon.address).list_sessions()],
               5.0, "the session ends with its last buffer")


def test_no_leak_after_100000_allocate_drop_cycles(daemon):
    for _ in range(1000):  # warm the allocator's cache and Python's
        gpumux.allocate(4096)
    gc.collect()
    before = rss_bytes()
    allocated_before = gpumux.memory_stats()["allocation.all.allocated"]
    for _ in range(100000):
        gpumux.allocate(4096)
    gc.collect()
    stats = gpumux.memory_stats()
    assert stats["allocated_bytes.all.current"] == 0
    assert stats["active_bytes.all.current"] == 0
    assert stats["allocation.all.allocated"] - allocated_before == 100000
    grown = rss_bytes() - before
    assert grown < 4 * MiB, f"RSS grew by {grown} bytes over 100,000 cycles"


def test_no_leak_of_streams_events_and_views(daemon):
    np = pytest.importorskip("numpy")
    gpumux.init()
    gc.collect()
    before = rss_bytes()
    for _ in range(2000):
        buffer = gpumux.allocate(4096)
        np.asarray(buffer)[0] = 1
        buffer.__dlpack__()
        gpumux.Event().record()
    for _ in range(200):
        gpumux.Stream()
    del buffer
    gc.collect()
    session = next(s for s in gpumux.observe(daemon.address).list_sessions()
                   if s["session_id"] == gpumux.default_client().session_id)
    assert (session["streams"], session["events"]) == (0, 0)
    assert gpumux.memory_allocated() == 0
    assert rss_bytes() - before < 4 * MiB
