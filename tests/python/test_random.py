"""torch.cuda.random's functions over the daemon's generators."""

import os

import numpy as np
import pytest

import gpumux
from conftest import Daemon, run_python


def test_seeds_and_states(daemon):
    gpumux.manual_seed(1234)
    assert gpumux.initial_seed() == 1234
    state = gpumux.get_rng_state()
    assert isinstance(state, bytes) and len(state) == 16
    assert state[:8] == (1234).to_bytes(8, "little")
    buffer = gpumux.allocate(64)
    buffer.uniform_()
    first = buffer.tobytes()
    gpumux.set_rng_state(state)
    assert buffer.uniform_() == (1234, 0)
    assert buffer.tobytes() == first
    values = np.frombuffer(first, dtype=np.float32)
    assert ((values >= 0) & (values < 1)).all()
    gpumux.manual_seed_all(7)
    assert [s[:8] for s in gpumux.get_rng_state_all()] == [(7).to_bytes(8, "little")] * 2
    states = gpumux.get_rng_state_all()
    gpumux.set_rng_state_all(states)
    fresh = gpumux.seed()
    assert gpumux.initial_seed() == fresh
    assert gpumux.seed_all() >= 0


def test_fills(daemon):
    buffer = gpumux.allocate(4096)
    gpumux.manual_seed(0)
    buffer.normal_(mean=5.0, std=0.1, dtype="float64", count=100)
    values = np.frombuffer(buffer.tobytes(0, 800), dtype=np.float64)
    assert abs(values.mean() - 5.0) < 0.1
    buffer.uniform_(0, 10, dtype="int32", count=10)
    ints = np.frombuffer(buffer.tobytes(0, 40), dtype=np.int32)
    assert ((ints >= 0) & (ints < 10)).all()
    buffer.random_(dtype="int64", count=4)
    with pytest.raises(ValueError, match="unknown dtype 'complex64'"):
        buffer.uniform_(dtype="complex64")
    with pytest.raises(gpumux.OutOfRangeError):
        buffer.uniform_(dtype="float32", count=2000)


def test_bad_states(daemon):
    with pytest.raises(gpumux.InvalidArgumentError, match="RNG state is wrong size"):
        gpumux.set_rng_state(b"123")
    with pytest.raises(gpumux.InvalidArgumentError):
        gpumux.set_rng_state_all([gpumux.get_rng_state()])


def test_torch_byte_tensor_state(daemon):
    torch = pytest.importorskip("torch")
    state = torch.tensor(list((99).to_bytes(8, "little")) + [0] * 8, dtype=torch.uint8)
    gpumux.set_rng_state(state)
    assert gpumux.initial_seed() == 99


def test_seeds_wait_for_the_connection_and_need_no_daemon(tmp_path):
    """torch.cuda.manual_seed and seed before CUDA initialises are deferred,
    and never run without CUDA: without a daemon they are ignored; once a
    daemon answers, the latest of each kind applies."""
    code = """
import gpumux
gpumux.manual_seed(5)
gpumux.manual_seed_all(6)
assert gpumux.seed() is None and gpumux.seed_all() is None
gpumux.manual_seed_all(7)
gpumux.manual_seed(1234)
assert not gpumux.is_initialized()
print(gpumux.device_count())
"""
    alone = dict(os.environ, GPUMUX_ADDRESS="unix://" + str(tmp_path / "nobody.sock"))
    assert run_python(code, alone).split() == ["0"]
    d = Daemon()
    try:
        code += """
print(gpumux.initial_seed())
with gpumux.device(1):
    print(gpumux.initial_seed())
"""
        assert run_python(code, d.env()).split() == ["2", "1234", "7"]
    finally:
        d.stop()
    with pytest.raises(RuntimeError, match="Overflow when unpacking long"):
        gpumux.manual_seed(1 << 64)
    with pytest.raises(RuntimeError, match="Overflow when unpacking long"):
        gpumux.manual_seed_all(-(1 << 63) - 1)
