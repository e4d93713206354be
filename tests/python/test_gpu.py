"""The package on a CUDA daemon with CUDA PyTorch (ctest label gpu): zero-copy
views through __cuda_array_interface__ and DLPack, and a small model trained
on gpumux's allocator (use_gpumux_allocator) giving the losses it gives on
PyTorch's own, its memory visible to `gpumux stats` from another process.

Needs a GPU, a CUDA build of PyTorch (>= 2.0, for CUDAPluggableAllocator) and
GPUMUX_CLI (the gpumux command, set by ctest). Nothing here is skipped: on a
machine without them the tests fail and say what is missing.
"""

import json
import os
import subprocess
import sys

import pytest

import gpumux
from conftest import Daemon

torch = pytest.importorskip("torch")
MiB = 1 << 20
KDLCUDA = 2


@pytest.fixture(scope="module")
def daemon():
    assert torch.cuda.is_available(), (
        f"the gpu tests need CUDA PyTorch and a GPU; torch {torch.__version__} sees none")
    d = Daemon(extra_args=("--backend=cuda",))
    yield d
    gpumux.set_default_client(None)
    d.stop()


def test_the_daemon_serves_the_gpu(daemon):
    client = gpumux.connect(daemon.address)
    assert client.backend == "cuda"
    assert gpumux.get_device_name(0) == torch.cuda.get_device_name(0)


def test_cuda_array_interface_is_a_view_in_torch(daemon):
    buffer = gpumux.allocate(4 * MiB)
    interface = buffer.__cuda_array_interface__
    assert interface["version"] == 3
    assert interface["data"] == (buffer.ptr, False)
    assert interface["shape"] == (4 * MiB,) and interface["typestr"] == "|u1"
    assert interface["stream"] is None
    tensor = torch.as_tensor(buffer, device="cuda")
    assert tensor.is_cuda and tensor.data_ptr() == buffer.ptr and tensor.numel() == 4 * MiB
    tensor.fill_(7)
    torch.cuda.synchronize()
    assert buffer.tobytes(0, 16) == b"\x07" * 16
    buffer.memset(3)  # the daemon's stream; waited
    assert int(tensor[:1024].sum()) == 3 * 1024
    with pytest.raises(BufferError, match="the buffer protocol needs host memory"):
        memoryview(buffer)


def test_dlpack_is_a_view_in_torch_and_keeps_the_buffer(daemon):
    buffer = gpumux.allocate(MiB)
    assert buffer.__dlpack_device__() == (KDLCUDA, 0)
    tensor = torch.from_dlpack(buffer)
    assert tensor.device == torch.device("cuda", 0) and tensor.data_ptr() == buffer.ptr
    tensor[:8] = torch.arange(8, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    assert buffer.tobytes(0, 8) == bytes(range(8))
    with pytest.raises(BufferError, match="view"):
        buffer.free()
    ptr = buffer.ptr
    del buffer  # the capsule's tensor keeps the memory
    assert tensor.data_ptr() == ptr and int(tensor[:8].sum()) == 28
    del tensor
    assert gpumux.memory_allocated() == 0


# One training run in a process of its own: the allocator is chosen before
# PyTorch's first CUDA allocation. Prints the losses as JSON, then, with
# `hold`, keeps the model and waits for a line on stdin.
TRAIN = r"""
import json, os, sys
import torch
import gpumux, gpumux.torch
if sys.argv[1] == "gpumux":
    gpumux.torch.use_gpumux_allocator()
torch.use_deterministic_algorithms(True)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                            torch.nn.Linear(512, 10)).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
data = torch.randn(64, 256, device="cuda")
target = torch.randint(0, 10, (64,), device="cuda")
losses = []
for _ in range(20):
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(data), target)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
print(json.dumps(losses), flush=True)
if len(sys.argv) > 2:
    sys.stdin.readline()
"""


def train(daemon, allocator, hold=False):
    env = daemon.env(CUBLAS_WORKSPACE_CONFIG=":4096:8")
    args = [sys.executable, "-c", TRAIN, allocator] + (["hold"] if hold else [])
    return subprocess.Popen(args, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_training_on_gpumux_gives_the_same_losses_and_shows_in_gpumux_stats(daemon):
    plain = train(daemon, "torch")
    out, err = plain.communicate(timeout=300)
    assert plain.returncode == 0, err
    expected = json.loads(out)

    ours = train(daemon, "gpumux", hold=True)
    try:
        losses = json.loads(ours.stdout.readline())
        assert losses == pytest.approx(expected, rel=1e-6, abs=1e-6)
        assert losses[-1] < losses[0]
        # Another process (the CLI) sees the trainer's session holding memory.
        cli = os.environ["GPUMUX_CLI"]
        sessions = json.loads(subprocess.run(
            [cli, "--address", daemon.address, "sessions", "--json"], check=True,
            capture_output=True, text=True, timeout=60).stdout)
        assert sessions, "the trainer's session is not listed"
        stats = json.loads(subprocess.run(
            [cli, "--address", daemon.address, "stats", "--device", "0", "--json"], check=True,
            capture_output=True, text=True, timeout=60).stdout)
        assert stats["allocated_bytes.all.current"] > 0
        assert stats["allocation.all.allocated"] > 0
    finally:
        ours.stdin.write("done\n")
        ours.stdin.flush()
        _, err = ours.communicate(timeout=120)
    assert ours.returncode == 0, err
