#!/usr/bin/python3
"""A gpumux client written in Python from the .proto files alone.

It starts a real gpumuxd (host backend), runs a C++ libgpumux program that
allocates shareable memory, fills it with seeded random bytes and prints a
share token, then - speaking only the wire API generated from proto/ - opens
a session, imports the token, fetches the segment's sealed memory file from
the daemon's memory socket (SCM_RIGHTS on "<socket>.memfd"), maps it and
checks every byte; it also allocates memory of its own, writes through its
mapping, and reads PyTorch's stats keys; and it creates a stream, copies
bytes in through the staging buffer, generates random numbers on the stream
and reads them back. Exit status 0 means it all held.

usage: proto_client_test.py SOURCE_DIR GPUMUXD CPP_WRITER
"""
import fcntl
import mmap
import os
import socket
import subprocess
import sys
import tempfile
import time
import unittest

SOURCE_DIR, GPUMUXD, CPP_WRITER = sys.argv[1:4]
del sys.argv[1:4]

GEN_DIR = tempfile.mkdtemp(prefix="gpumux-py-")
from grpc_tools import protoc  # noqa: E402

PROTO_ROOT = os.path.join(SOURCE_DIR, "proto")
for name in ("common", "session", "device", "memory", "observe", "stream", "copy", "random", "nvtx", "profile"):
    rc = protoc.main(["protoc", f"-I{PROTO_ROOT}", f"--python_out={GEN_DIR}", f"--grpc_python_out={GEN_DIR}",
                      os.path.join(PROTO_ROOT, "gpumux", "v1", f"{name}.proto")])
    assert rc == 0, f"protoc failed for {name}.proto"
sys.path.insert(0, GEN_DIR)

import grpc  # noqa: E402
from gpumux.v1 import common_pb2, memory_pb2, memory_pb2_grpc, observe_pb2, observe_pb2_grpc  # noqa: E402
from gpumux.v1 import session_pb2, session_pb2_grpc  # noqa: E402
from gpumux.v1 import copy_pb2, copy_pb2_grpc, random_pb2, random_pb2_grpc  # noqa: E402
from gpumux.v1 import stream_pb2, stream_pb2_grpc  # noqa: E402


def pattern(seed, size):
    """tests/support/test_pattern.h's FillPattern: xorshift64* words, little-endian."""
    mask = (1 << 64) - 1
    x = seed or 0x9E3779B97F4A7C15
    words = []
    for _ in range((size + 7) // 8):
        x ^= x >> 12
        x = (x ^ (x << 25)) & mask
        x ^= x >> 27
        words.append((x * 0x2545F4914F6CDD1D) & mask)
    import struct
    return struct.pack(f"<{len(words)}Q", *words)[:size]


class Session:
    """Session.Open stream: the session lives as long as this stream."""

    def __init__(self, channel, name):
        self._requests = []
        import queue
        self._queue = queue.Queue()
        self._queue.put(session_pb2.SessionClientMessage(
            open=session_pb2.OpenSessionRequest(client_name=name, pid=os.getpid())))
        stub = session_pb2_grpc.SessionStub(channel)
        self._responses = stub.Open(iter(self._queue.get, None))
        opened = next(self._responses).opened
        self.id = opened.session_id
        self.credentials = f"{opened.session_id}:{opened.secret}"
        self.metadata = (("gpumux-session", self.credentials),)

    def close(self):
        self._queue.put(None)  # half-close: the daemon ends the session
        for _ in self._responses:
            pass


def fetch_memory_file(socket_path, session, key):
    """The memory socket's protocol (proto/gpumux/v1/common.proto): one request
    "gmxmem1 <session_id>:<secret> <key>", one reply "ok <size>" with the
    descriptor, or "error <code> <message>"."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as conn:
        conn.connect(socket_path + ".memfd")
        conn.send(f"gmxmem1 {session.credentials} {key}".encode())
        reply, fds, _, _ = socket.recv_fds(conn, 4096, 1)
    reply = reply.decode()
    if not reply.startswith("ok "):
        for fd in fds:
            os.close(fd)
        raise RuntimeError(reply)
    assert len(fds) == 1, reply
    return fds[0], int(reply[3:])


def map_segment(socket_path, session, handle, size):
    assert handle.kind == common_pb2.HANDLE_KIND_HOST_MEMFD
    fd, file_size = fetch_memory_file(socket_path, session, handle.data.decode())
    try:
        assert file_size == size, (file_size, size)
        # Sealed: nobody holding it can shrink it under a mapping.
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        assert seals & fcntl.F_SEAL_SHRINK and seals & fcntl.F_SEAL_GROW, seals
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


class ProtoClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="gpumux-pyd-")
        cls.socket = os.path.join(cls.dir, "gpumux.sock")
        cls.daemon = subprocess.Popen([GPUMUXD, f"--socket={cls.socket}", "--host-device-memory=256MiB",
                                       "--log-level=warn"])
        deadline = time.time() + 10
        while not os.path.exists(cls.socket):
            assert time.time() < deadline, "gpumuxd did not start"
            time.sleep(0.02)
        cls.channel = grpc.insecure_channel(f"unix://{cls.socket}")
        grpc.channel_ready_future(cls.channel).result(timeout=10)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.daemon.terminate()
        assert cls.daemon.wait(timeout=10) == 0

    def test_reads_bytes_a_cpp_client_wrote(self):
        size, seed = 3 * 1024 * 1024 + 123, 20261130
        writer = subprocess.Popen([CPP_WRITER, f"unix://{self.socket}", str(size), str(seed)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            token = writer.stdout.readline().strip()
            self.assertTrue(token.startswith("gpumux-share-"), token)
            session = Session(self.channel, "python-reader")
            memory = memory_pb2_grpc.MemoryStub(self.channel)
            alloc = memory.Import(memory_pb2.ImportRequest(token=token), metadata=session.metadata).allocation
            self.assertEqual(alloc.requested_size, size)
            segment = map_segment(self.socket, session, alloc.segment_handle, alloc.segment_size)
            data = segment[alloc.offset:alloc.offset + size]
            self.assertEqual(data, pattern(seed, size))
            segment.close()
            memory.Free(memory_pb2.FreeRequest(allocation_ids=[alloc.allocation_id]), metadata=session.metadata)
            session.close()
        finally:
            writer.stdin.close()
            self.assertEqual(writer.wait(timeout=10), 0)

    def test_allocates_maps_and_reads_stats(self):
        session = Session(self.channel, "python-own")
        memory = memory_pb2_grpc.MemoryStub(self.channel)
        alloc = memory.Allocate(memory_pb2.AllocateRequest(device=1, size=5000), metadata=session.metadata).allocation
        self.assertEqual(alloc.size, 5120)  # PyTorch's 512-byte rounding
        segment = map_segment(self.socket, session, alloc.segment_handle, alloc.segment_size)
        payload = pattern(7, 5000)
        segment[alloc.offset:alloc.offset + 5000] = payload
        again = map_segment(self.socket, session, alloc.segment_handle, alloc.segment_size)
        self.assertEqual(again[alloc.offset:alloc.offset + 5000], payload)
        stats = memory.GetStats(memory_pb2.GetStatsRequest(device=1), metadata=session.metadata).values
        self.assertEqual(stats["allocated_bytes.all.current"], 5120)
        self.assertEqual(stats["requested_bytes.all.current"], 5000)
        self.assertEqual(len(stats), 122)
        observe = observe_pb2_grpc.ObserveStub(self.channel)
        listed = observe.ListSessions(observe_pb2.ListSessionsRequest()).sessions
        mine = [s for s in listed if s.session_id == session.id]
        self.assertEqual(mine[0].devices[1].allocated_bytes, 5120)
        with self.assertRaises(grpc.RpcError) as err:
            memory.Free(memory_pb2.FreeRequest(allocation_ids=[alloc.allocation_id + 1000]),
                        metadata=session.metadata)
        self.assertEqual(err.exception.code(), grpc.StatusCode.NOT_FOUND)
        segment.close()
        again.close()
        session.close()

    def test_stream_staging_copy_and_random_numbers(self):
        import struct
        session = Session(self.channel, "python-streams")
        md = session.metadata
        memory = memory_pb2_grpc.MemoryStub(self.channel)
        streams = stream_pb2_grpc.StreamStub(self.channel)
        copy = copy_pb2_grpc.CopyStub(self.channel)
        random = random_pb2_grpc.RandomStub(self.channel)

        created = streams.Create(stream_pb2.CreateStreamRequest(device=1, priority=-1), metadata=md)
        self.assertEqual(created.priority, -1)
        on_stream = copy_pb2.CopyOptions(stream=created.stream)
        ref = stream_pb2.StreamRef(device=1, stream=created.stream)

        # Bytes in through the staging buffer, on the new stream.
        size = 1_000_003
        alloc = memory.Allocate(memory_pb2.AllocateRequest(device=1, size=size, stream=created.stream),
                                metadata=md).allocation
        staging = copy.GetStagingBuffer(copy_pb2.GetStagingBufferRequest(min_size=size), metadata=md)
        self.assertEqual(staging.size, 2 * 1024 * 1024)
        buffer = map_segment(self.socket, session, staging.handle, staging.size)
        payload = pattern(11, size)
        buffer[:size] = payload
        copy.HostToDevice(copy_pb2.HostToDeviceRequest(
            dst=copy_pb2.DeviceRange(allocation_id=alloc.allocation_id),
            staging=copy_pb2.StagingRange(offset=0, size=size), options=on_stream), metadata=md)
        streams.Synchronize(stream_pb2.StreamRequest(stream=ref), metadata=md)
        self.assertTrue(streams.Query(stream_pb2.StreamRequest(stream=ref), metadata=md).done)
        back = copy.DeviceToHost(copy_pb2.DeviceToHostRequest(
            src=copy_pb2.DeviceRange(allocation_id=alloc.allocation_id), inline_size=size, options=on_stream),
            metadata=md)
        self.assertEqual(back.data, payload)

        # Random numbers: the same seed gives the same values; uniform in [low, high).
        count = 100_000
        numbers = memory.Allocate(memory_pb2.AllocateRequest(device=1, size=4 * count, stream=created.stream),
                                  metadata=md).allocation
        generate = random_pb2.GenerateRequest(
            dst=copy_pb2.DeviceRange(allocation_id=numbers.allocation_id), dtype=random_pb2.DTYPE_FLOAT32,
            elements=count, uniform=random_pb2.Uniform(low=-2.0, high=3.0), options=on_stream)
        drawn = []
        for _ in range(2):
            random.ManualSeed(random_pb2.ManualSeedRequest(device=1, seed=1234), metadata=md)
            reply = random.Generate(generate, metadata=md)
            self.assertEqual((reply.seed, reply.offset), (1234, 0))
            # Read back through the staging buffer this time.
            copy.DeviceToHost(copy_pb2.DeviceToHostRequest(
                src=copy_pb2.DeviceRange(allocation_id=numbers.allocation_id),
                staging=copy_pb2.StagingRange(offset=0, size=4 * count),
                options=copy_pb2.CopyOptions(stream=created.stream, wait=True)), metadata=md)
            drawn.append(bytes(buffer[:4 * count]))
        self.assertEqual(drawn[0], drawn[1])
        values = struct.unpack(f"<{count}f", drawn[0])
        self.assertTrue(all(-2.0 <= v < 3.0 for v in values))
        self.assertAlmostEqual(sum(values) / count, 0.5, delta=0.05)
        state = random.GetState(random_pb2.GetRngStateRequest(device=1), metadata=md).states[0]
        seed, offset = struct.unpack("<QQ", state)
        self.assertEqual(seed, 1234)
        self.assertGreater(offset, 0)
        self.assertEqual(offset % 4, 0)

        with self.assertRaises(grpc.RpcError) as err:
            copy.DeviceToHost(copy_pb2.DeviceToHostRequest(
                src=copy_pb2.DeviceRange(allocation_id=alloc.allocation_id, offset=size), inline_size=1),
                metadata=md)
        self.assertEqual(err.exception.code(), grpc.StatusCode.OUT_OF_RANGE)
        buffer.close()
        streams.Destroy(stream_pb2.DestroyStreamRequest(stream=ref), metadata=md)
        session.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
