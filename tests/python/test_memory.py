"""Buffers, sharing, and torch.cuda's memory statistics, against a real daemon."""

import json
import os
import signal
import subprocess
import sys

import numpy
import pytest

import gpumux
from conftest import run_python

MiB = 1 << 20


def test_allocate_counts_in_memory_stats_and_frees_when_dropped(daemon):
    assert gpumux.memory_allocated() == 0
    buffer = gpumux.allocate(3 * MiB)
    assert buffer.nbytes == len(buffer) == 3 * MiB
    assert buffer.device == 0
    assert buffer.allocated_size == 3 * MiB
    assert gpumux.memory_allocated() == 3 * MiB
    assert gpumux.memory_reserved() >= 3 * MiB
    assert gpumux.max_memory_allocated() == 3 * MiB
    del buffer
    assert gpumux.memory_allocated() == 0
    assert gpumux.max_memory_allocated() == 3 * MiB
    gpumux.reset_peak_memory_stats()
    assert gpumux.max_memory_allocated() == 0
    stats = gpumux.memory_stats()
    assert len(stats) == 122
    assert list(stats) == sorted(stats)
    assert stats["allocation.all.allocated"] == 1 and stats["allocation.all.freed"] == 1
    gpumux.reset_accumulated_memory_stats()
    assert gpumux.memory_stats()["allocation.all.allocated"] == 0


def test_with_block_and_free(daemon):
    with gpumux.allocate(MiB) as buffer:
        assert gpumux.memory_allocated() == MiB
    assert buffer.freed
    assert gpumux.memory_allocated() == 0
    buffer.free()  # no-op once freed
    with pytest.raises(ValueError, match="the buffer was freed"):
        buffer.nbytes
    assert repr(buffer) == "<gpumux.Buffer freed>"


def test_allocate_on_another_device_and_stream(daemon):
    stream = gpumux.Stream(device=1)
    buffer = gpumux.allocate(MiB, device="cuda:1", stream=stream)
    assert buffer.device == 1
    assert gpumux.memory_allocated(1) == MiB
    assert gpumux.memory_allocated(0) == 0
    with pytest.raises(gpumux.InvalidArgumentError, match="stream"):
        gpumux.allocate(MiB, device=0, stream=stream)


def test_bad_sizes(daemon):
    with pytest.raises(gpumux.InvalidArgumentError) as error:
        gpumux.allocate(0)
    assert isinstance(error.value, ValueError)
    with pytest.raises(gpumux.InvalidArgumentError, match="total capacity of 1073741824 bytes"):
        gpumux.allocate(1 << 40)
    # Precise errors, not pybind11's dump of the signature.
    with pytest.raises(gpumux.InvalidArgumentError,
                       match=r"nbytes must be a byte count in \[0, 2\*\*64\), not -1$"):
        gpumux.allocate(-1)
    with pytest.raises(gpumux.InvalidArgumentError, match=r"not 18446744073709551616$"):
        gpumux.allocate(1 << 64)
    with pytest.raises(gpumux.InvalidArgumentError, match=r"not -1$"):
        gpumux.default_client().allocate(-1)
    with pytest.raises(TypeError, match=r"^nbytes must be an int, not str$"):
        gpumux.allocate("1024")
    with pytest.raises(TypeError, match=r"^nbytes must be an int, not float$"):
        gpumux.allocate(1024.0)
    assert gpumux.allocate(numpy.int64(1024)).nbytes == 1024  # anything with __index__


def test_a_local_block_prints_its_address(daemon):
    buffer = gpumux.allocate(MiB)
    assert repr(buffer) == f"<gpumux.Buffer {MiB} bytes on device 0, local block at 0x{buffer.address:x}>"


def test_out_of_memory_carries_pytorchs_message(daemon):
    held = gpumux.allocate(700 * MiB)
    with pytest.raises(gpumux.OutOfMemoryError) as error:
        gpumux.allocate(700 * MiB)
    assert isinstance(error.value, RuntimeError)
    assert isinstance(error.value, gpumux.ResourceExhaustedError)
    assert error.value.code == "RESOURCE_EXHAUSTED"
    assert str(error.value).startswith("CUDA out of memory. Tried to allocate 700.00 MiB. GPU 0")
    assert gpumux.memory_stats()["num_ooms"] == 1
    del held


def test_memory_fraction_caps_the_session(daemon):
    gpumux.set_per_process_memory_fraction(0.25)
    with pytest.raises(gpumux.OutOfMemoryError):
        gpumux.allocate(300 * MiB)
    with pytest.raises(ValueError, match="Invalid fraction value: 1.5. Allowed range: 0~1"):
        gpumux.set_per_process_memory_fraction(1.5)
    with pytest.raises(TypeError, match="must be `float`"):
        gpumux.set_per_process_memory_fraction(1)
    gpumux.set_per_process_memory_fraction(1.0)
    gpumux.allocate(300 * MiB)


def test_empty_cache_releases_cached_segments(daemon):
    buffer = gpumux.allocate(30 * MiB)
    del buffer
    assert gpumux.memory_reserved() >= 30 * MiB
    released, segments = gpumux.empty_cache()
    assert released >= 30 * MiB and segments >= 1
    assert gpumux.memory_reserved() == 0


def test_summary_and_snapshot(daemon):
    buffer = gpumux.allocate(MiB)
    summary = gpumux.memory_summary()
    assert "PyTorch CUDA memory summary, device ID 0" in summary
    assert len(gpumux.memory_summary(abbreviated=True)) < len(summary)
    snapshot = gpumux.memory_snapshot()
    segment = next(s for s in snapshot if s["address"] <= buffer.address < s["address"] + s["total_size"])
    for key in ("device", "address", "total_size", "allocated_size", "active_size", "requested_size",
                "stream", "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks"):
        assert key in segment
    block = next(b for b in segment["blocks"] if b["address"] == buffer.address)
    assert block["state"] == "active_allocated" and block["size"] == MiB
    assert segment["session_id"] == gpumux.default_client().session_id


def test_deprecated_names_warn(daemon):
    with pytest.warns(FutureWarning, match="renamed to torch.cuda.memory_reserved"):
        assert gpumux.memory_cached() == gpumux.memory_reserved()
    with pytest.warns(FutureWarning):
        gpumux.max_memory_cached()
    with pytest.warns(FutureWarning):
        gpumux.reset_max_memory_cached()
    with pytest.warns(FutureWarning):
        gpumux.reset_max_memory_allocated()


def test_copies_memset_and_bad_ranges(daemon):
    buffer = gpumux.allocate(4096)
    buffer.copy_from(b"hello", offset=10)
    assert buffer.tobytes(10, 5) == b"hello"
    out = bytearray(5)
    buffer.copy_to(out, offset=10)
    assert out == b"hello"
    buffer.memset(7, offset=0, nbytes=4)
    assert buffer.tobytes(0, 4) == b"\x07" * 4
    other = gpumux.allocate(4096, device=1)
    other.copy_from(buffer, offset=0, src_offset=10, nbytes=5)
    assert other.tobytes(0, 5) == b"hello"
    with pytest.raises(gpumux.OutOfRangeError) as error:
        buffer.copy_from(b"x" * 10, offset=4090)
    assert isinstance(error.value, ValueError) and error.value.code == "OUT_OF_RANGE"
    with pytest.raises(ValueError, match="offset 5000 is past the end"):
        buffer.tobytes(5000)
    with pytest.raises(ValueError, match=r"memset value must be in \[0, 255\]"):
        buffer.memset(256)
    with pytest.raises(TypeError):
        buffer.copy_from(12345)
    with pytest.raises(BufferError, match="not writable"):
        buffer.copy_to(b"read-only bytes")


def test_share_and_import_in_another_process(daemon):
    buffer = gpumux.allocate(MiB, shareable=True)
    buffer.copy_from(b"shared bytes")
    token = buffer.share()
    out = run_python(
        "import gpumux\n"
        f"b = gpumux.import_buffer({token!r})\n"
        "print(b.tobytes(0, 12).decode())\n"
        "b.copy_from(b'written back')\n",
        daemon.env())
    assert out.strip() == "shared bytes"
    assert buffer.tobytes(0, 12) == b"written back"
    with pytest.raises(gpumux.FailedPreconditionError):
        gpumux.import_buffer(token)  # single use
    with pytest.raises(gpumux.InvalidArgumentError):
        gpumux.import_buffer("not a token")
    with pytest.raises(TypeError):
        gpumux.import_buffer(b"bytes")
    local = gpumux.allocate(MiB)
    with pytest.raises(gpumux.FailedPreconditionError, match="not shareable"):
        local.share()


def test_observer_sees_every_session(daemon):
    held = gpumux.allocate(2 * MiB)
    observer = gpumux.observe()
    mine = gpumux.default_client().session_id
    sessions = {s["session_id"]: s for s in observer.list_sessions()}
    assert sessions[mine]["devices"][0]["allocated_bytes"] == 2 * MiB
    assert observer.memory_stats(0, session=mine)["allocated_bytes.all.current"] == 2 * MiB
    assert observer.memory_stats(0)["allocated_bytes.all.current"] >= 2 * MiB
    assert "PyTorch CUDA memory summary" in observer.memory_summary(0, session=mine)
    assert any(s["session_id"] == mine for s in observer.memory_snapshot(session=mine))
    assert [d.name for d in observer.list_devices()] == ["gpumux host device 0", "gpumux host device 1"]
    with pytest.raises(gpumux.NotFoundError) as error:
        observer.memory_stats(0, session=999999)
    assert isinstance(error.value, LookupError)
    assert "GPU:0" in gpumux.list_gpu_processes(0)
    del held


def test_a_stopped_clients_leases_read_in_pytorchs_memory_viz(daemon):
    """A client that cannot answer (stopped) leaves its leases' blocks
    unknown: one block of state "unknown" spans each, so PyTorch's own
    torch.cuda._memory_viz, which wants a segment's blocks to add up to its
    size, reads the snapshot (it used to fail an assertion)."""
    from torch.cuda import _memory_viz
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, gpumux\n"
         "held = gpumux.allocate(3 << 20)\n"
         "print(gpumux.default_client().session_id, flush=True)\n"
         "sys.stdin.read()\n"],
        env=daemon.env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        session = int(child.stdout.readline())
        os.kill(child.pid, signal.SIGSTOP)
        segments = gpumux.observe().memory_snapshot(session=session)
    finally:
        os.kill(child.pid, signal.SIGCONT)
        child.stdin.close()
        assert child.wait(timeout=30) == 0
    assert segments
    for segment in segments:
        assert segment["blocks_unavailable"]
        assert "did not answer within 500ms" in segment["blocks_unavailable_reason"]
        assert [(b["state"], b["size"]) for b in segment["blocks"]] == [
            ("unknown", segment["total_size"])]
    stats = _memory_viz.stats(segments)
    assert stats["unknown"].value == sum(s["total_size"] for s in segments)


def test_ipc_collect(daemon):
    buffer = gpumux.allocate(MiB)
    del buffer
    mappings, nbytes = gpumux.ipc_collect()
    assert mappings >= 0 and nbytes >= 0


def test_daemon_allocation_mode(daemon):
    client = gpumux.connect(daemon.address, allocation="daemon")
    buffer = client.allocate(MiB, 0)
    assert not buffer.local
    stats = json.loads(json.dumps(client.memory_stats(0)))
    assert stats["allocated_bytes.all.current"] == MiB


def test_an_operator_observes_over_the_tcp_observe_port(daemon):
    import socket

    from conftest import Daemon

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    remote = Daemon(extra_args=(f"--listen=127.0.0.1:{port}",))
    try:
        client = gpumux.connect(remote.address, client_name="worker")
        held = client.allocate(5 * MiB, 1)
        observer = gpumux.observe(f"127.0.0.1:{port}")
        sessions = observer.list_sessions()
        assert [s["client_name"] for s in sessions] == ["worker"]
        assert sessions[0]["devices"][1]["allocated_bytes"] == 5 * MiB
        assert observer.memory_stats(1)["allocated_bytes.all.current"] == 5 * MiB
        # The observe port serves no sessions: connecting there is refused.
        with pytest.raises(gpumux.PermissionDeniedError, match="is not served on the TCP listener") as error:
            gpumux.connect(f"127.0.0.1:{port}", timeout=2.0)
        assert isinstance(error.value, PermissionError)
        del held, client
    finally:
        remote.stop()


def test_allocate_follows_the_default_connection(daemon):
    first = gpumux.connect(daemon.address)
    second = gpumux.connect(daemon.address)
    gpumux.set_default_client(first)
    assert gpumux.default_client() is first
    on_first = gpumux.allocate(MiB)
    gpumux.set_default_client(second)
    on_second = gpumux.allocate(2 * MiB)
    assert first.memory_stats(0)["allocated_bytes.all.current"] == MiB
    assert second.memory_stats(0)["allocated_bytes.all.current"] == 2 * MiB
    del on_first, on_second
    assert first.memory_stats(0)["allocated_bytes.all.current"] == 0
    assert second.memory_stats(0)["allocated_bytes.all.current"] == 0
    # None: the next call connects again.
    gpumux.set_default_client(None)
    assert not gpumux.is_initialized()
    with gpumux.allocate(MiB):
        assert gpumux.default_client() not in (first, second)


def test_allocate_and_drop_from_threads_while_others_wait_for_leases(daemon):
    # Small blocks come from the cache with the GIL held; the large ones wait
    # for a lease without it. Together they must keep the books exact.
    import threading

    errors = []

    def work(seed):
        try:
            held = []
            for i in range(400):
                size = (8 + (seed * 7 + i) % 24) * MiB if i % 50 == 0 else 512 + (seed * 131 + i) % 60000
                buffer = gpumux.allocate(size)
                buffer.memset(seed, nbytes=min(size, 4096))
                held.append(buffer)
                if len(held) > 8:
                    victim = held.pop(0)
                    assert victim.tobytes(nbytes=16) == bytes([seed]) * 16
                    del victim
        except Exception as error:  # noqa: BLE001: reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(1, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    stats = gpumux.memory_stats()
    assert stats["allocation.all.current"] == 0
    assert stats["allocated_bytes.all.current"] == 0
    assert stats["allocation.all.allocated"] == stats["allocation.all.freed"] == 4 * 400
