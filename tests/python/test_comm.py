"""gpumux.comm (torch.cuda.comm) against a real daemon with three host devices:
results checked element by element, torch's identity rules, and each argument
rule with its message."""

import re
import warnings

import numpy as np
import pytest
import torch

import gpumux
from conftest import Daemon


@pytest.fixture(scope="module")
def daemon():
    d = Daemon(["--host-devices=3"])
    yield d
    gpumux.set_default_client(None)
    d.stop()


def array(shape, device=0, dtype=np.float32, start=0):
    """A numpy array viewing a new Buffer on `device`, holding start, start+1, ..."""
    count = int(np.prod(shape))
    buffer = gpumux.allocate(max(count, 1) * np.dtype(dtype).itemsize, device=device)
    view = np.frombuffer(buffer, dtype, count).reshape(shape)
    view[...] = np.arange(start, start + count).reshape(shape)
    return view


def tensor(shape, device=0, dtype=torch.float32, start=0):
    """A CPU torch tensor over a new host-backend Buffer."""
    count = int(np.prod(shape))
    buffer = gpumux.allocate(count * torch.empty((), dtype=dtype).element_size(), device=device)
    view = torch.frombuffer(buffer, dtype=dtype, count=count).view(shape)
    view.copy_(torch.arange(start, start + count).view(shape))
    return view


def buffer_of(obj):
    """The gpumux.Buffer a numpy array's .base chain ends in."""
    while not isinstance(obj, gpumux.Buffer):
        assert obj is not None, "no gpumux.Buffer under the array"
        obj = obj.obj if isinstance(obj, memoryview) else obj.base
    return obj


def device_of(obj):
    return gpumux._C._find_buffer(obj.__array_interface__["data"][0], obj.nbytes).device


def sync():
    for device in range(gpumux.device_count()):
        gpumux.synchronize(device)


def invalid(message):
    """pytest.raises for gpumux.InvalidArgumentError with exactly `message`;
    the class is both torch's RuntimeError and ValueError."""
    return pytest.raises(gpumux.InvalidArgumentError, match=f"^{re.escape(message)}$")


# ---- broadcast ----

def test_broadcast_copies_to_every_device_and_returns_the_input_on_its_own(daemon):
    source = array((4, 8), device=1)
    results = gpumux.comm.broadcast(source, ["cuda:0", 1, 2])
    sync()
    assert isinstance(results, tuple) and len(results) == 3
    assert results[1] is source
    for device, result in zip((0, 2), (results[0], results[2])):
        assert isinstance(result, np.ndarray) and result.dtype == np.float32 and result.shape == (4, 8)
        assert buffer_of(result).device == device
        assert not np.shares_memory(result, source)
        np.testing.assert_array_equal(result, np.arange(32, dtype=np.float32).reshape(4, 8))


def test_broadcast_into_out_returns_the_out_tensors(daemon):
    source = array((3, 5), dtype=np.int64, start=100)
    out = [array((3, 5), device=d, dtype=np.int64, start=-50) for d in (1, 2)]
    results = gpumux.comm.broadcast(source, out=out)
    sync()
    assert len(results) == 2 and results[0] is out[0] and results[1] is out[1]
    for result in out:
        np.testing.assert_array_equal(result, np.arange(100, 115).reshape(3, 5))


def test_broadcast_of_a_buffer_gives_buffers(daemon):
    source = gpumux.allocate(256, device=0)
    source.copy_from(bytes(range(256)))
    results = gpumux.comm.broadcast(source, [0, 2])
    sync()
    assert results[0] is source
    assert isinstance(results[1], gpumux.Buffer)
    assert results[1].device == 2 and results[1].nbytes == 256
    assert results[1].tobytes() == bytes(range(256))


def test_broadcast_of_torch_tensors_gives_torch_tensors(daemon):
    source = tensor((2, 6), device=0, dtype=torch.float64, start=7)
    results = gpumux.comm.broadcast(source, [torch.device("cuda", 1), 0])
    sync()
    assert results[1] is source
    copy = results[0]
    assert isinstance(copy, torch.Tensor) and copy.dtype == torch.float64 and copy.shape == (2, 6)
    assert torch.equal(copy, torch.arange(7, 19, dtype=torch.float64).view(2, 6))
    assert gpumux._C._find_buffer(copy.data_ptr(), 96).device == 1


def test_broadcast_of_a_slice(daemon):
    whole = array((6, 4), device=0)
    results = gpumux.comm.broadcast(whole[2:4], [1])
    sync()
    np.testing.assert_array_equal(results[0], np.arange(8, 16, dtype=np.float32).reshape(2, 4))


def test_broadcast_argument_rules(daemon):
    source = array((4, 8))
    with invalid("Exactly one of 'devices' and 'out' must be specified, but got devices=None and "
                 "out=None"):
        gpumux.comm.broadcast(source)
    out = [array((4, 8), device=1)]
    with pytest.raises(RuntimeError, match=r"^Exactly one of 'devices' and 'out' must be "
                                           r"specified, but got devices=\[1\] and out=\[array"):
        gpumux.comm.broadcast(source, [1], out=out)
    with invalid("Expected non-negative device index, but got -1"):
        gpumux.comm.broadcast(source, [0, -1])
    with invalid("Expected all output tensors to have same shape as the source tensor [4, 8], but "
                 "output tensor at index 1 has shape [32]"):
        gpumux.comm.broadcast(source, out=[out[0], array((32,), device=2)])


# ---- broadcast_coalesced ----

def test_broadcast_coalesced_returns_one_list_per_device_in_input_order(daemon):
    inputs = [array((3, 5)), array((7,), dtype=np.int64, start=40), array((2, 2), dtype=np.float64,
                                                                           start=-3)]
    outputs = gpumux.comm.broadcast_coalesced(inputs, [0, 2, 1], buffer_size=64)
    sync()
    assert len(outputs) == 3 and all(len(per_device) == 3 for per_device in outputs)
    assert all(result is given for result, given in zip(outputs[0], inputs))
    for device, per_device in zip((2, 1), outputs[1:]):
        for result, given in zip(per_device, inputs):
            assert result.dtype == given.dtype and result.shape == given.shape
            assert buffer_of(result).device == device
            np.testing.assert_array_equal(result, given)


def test_broadcast_coalesced_needs_every_tensor_on_devices0(daemon):
    with invalid("All tensors must be on devices[0]: 0"):
        gpumux.comm.broadcast_coalesced([array((4,)), array((4,), device=1)], [0, 1])


# ---- reduce_add ----

def test_reduce_add_sums_on_the_destination(daemon):
    inputs = [array((4, 8), device=d, start=10 * d) for d in range(3)]
    result = gpumux.comm.reduce_add(inputs, destination=1)
    sync()
    assert result.shape == (4, 8) and result.dtype == np.float32
    assert buffer_of(result).device == 1
    expected = sum(np.arange(10 * d, 10 * d + 32, dtype=np.float32) for d in range(3))
    np.testing.assert_array_equal(result, expected.reshape(4, 8))
    for d, given in enumerate(inputs):  # inputs untouched
        np.testing.assert_array_equal(given, np.arange(10 * d, 10 * d + 32).reshape(4, 8))


def test_reduce_add_defaults_to_the_current_device(daemon):
    inputs = [tensor((5,), device=d, dtype=torch.int32, start=d) for d in (2, 0)]
    with gpumux.device(2):
        result = gpumux.comm.reduce_add(inputs)
    sync()
    assert isinstance(result, torch.Tensor) and result.dtype == torch.int32
    assert gpumux._C._find_buffer(result.data_ptr(), 20).device == 2
    assert result.tolist() == [2, 4, 6, 8, 10]


def test_reduce_add_returns_a_single_input_as_is(daemon):
    single = array((3,), device=1)
    assert gpumux.comm.reduce_add([single], destination=1) is single


def test_reduce_add_argument_rules(daemon):
    with pytest.raises(ValueError, match=r"^input 1 has invalid size: got 4x4, but expected 4x8$"):
        gpumux.comm.reduce_add([array((4, 8)), array((4, 4), device=1)], destination=0)
    with pytest.raises(RuntimeError, match=r"^reduce_add expects destination to be on the same "
                                           r"GPU with one of the tensors$"):
        gpumux.comm.reduce_add([array((4,)), array((4,), device=1)], destination=2)


# ---- reduce_add_coalesced ----

def test_reduce_add_coalesced_sums_each_position(daemon):
    lists = [[array((2, 3), device=d, start=d), array((5,), device=d, dtype=np.int64, start=100 * d)]
             for d in range(3)]
    results = gpumux.comm.reduce_add_coalesced(lists, destination=2, buffer_size=16)
    sync()
    assert isinstance(results, tuple) and len(results) == 2
    np.testing.assert_array_equal(results[0], (3 * np.arange(6) + 3).reshape(2, 3))
    assert results[0].dtype == np.float32
    np.testing.assert_array_equal(results[1], 3 * np.arange(5) + 300)
    assert results[1].dtype == np.int64
    assert all(buffer_of(r).device == 2 for r in results)


# ---- scatter ----

def test_scatter_in_equal_chunks_keeps_a_view_on_the_source_device(daemon):
    source = array((6, 4), device=0)
    chunks = gpumux.comm.scatter(source, [0, 1, 2])
    sync()
    assert isinstance(chunks, tuple) and len(chunks) == 3
    assert np.shares_memory(chunks[0], source) and chunks[0] is not source
    for i, chunk in enumerate(chunks):
        assert chunk.shape == (2, 4)
        assert buffer_of(chunk).device == i
        np.testing.assert_array_equal(chunk, np.arange(8 * i, 8 * i + 8).reshape(2, 4))


def test_scatter_with_chunk_sizes_negative_dim_and_fewer_chunks(daemon):
    source = array((3, 6), device=1)
    expected = np.arange(18, dtype=np.float32).reshape(3, 6)
    chunks = gpumux.comm.scatter(source, [2, 1, 0], chunk_sizes=[1, 2, 3], dim=-1)
    sync()
    for chunk, device, (lo, hi) in zip(chunks, (2, 1, 0), ((0, 1), (1, 3), (3, 6))):
        assert buffer_of(chunk).device == device
        np.testing.assert_array_equal(chunk, expected[:, lo:hi])
    # 5 rows over 3 devices: 2, 2, 1; 2 rows over 3 devices: two chunks.
    assert [c.shape[0] for c in gpumux.comm.scatter(array((5, 2)), [0, 1, 2])] == [2, 2, 1]
    assert len(gpumux.comm.scatter(array((2, 2)), [0, 1, 2])) == 2
    # One chunk on the tensor's own device: a view, as tensor.chunk(1)[0] is, not the tensor.
    whole = gpumux.comm.scatter(source, [1])[0]
    assert whole is not source and np.shares_memory(whole, source)
    np.testing.assert_array_equal(whole, expected)


def test_scatter_on_streams_and_into_out(daemon):
    source = tensor((6, 2), device=0, dtype=torch.int64)
    streams = [None, gpumux.Stream(device=1), gpumux.Stream(device=2)]
    chunks = gpumux.comm.scatter(source, [0, 1, 2], streams=streams)
    sync()
    assert [c.tolist() for c in chunks] == [[[0, 1], [2, 3]], [[4, 5], [6, 7]], [[8, 9], [10, 11]]]
    out = [tensor((1, 2), device=2, dtype=torch.int64), tensor((5, 2), device=1, dtype=torch.int64)]
    results = gpumux.comm.scatter(source, out=out)
    sync()
    assert results[0] is out[0] and results[1] is out[1]
    assert out[0].tolist() == [[0, 1]] and out[1].view(-1).tolist() == list(range(2, 12))


def test_scatter_argument_rules(daemon):
    source = array((6, 4))
    with invalid("Expected the device associated with the stream at index 0 (was 1) to match the "
                 "device supplied at that index (expected 0)"):
        gpumux.comm.scatter(source, [0, 1], streams=[gpumux.Stream(device=1), None])
    with invalid("Expected devices and chunk_sizes to be of same length, but got len(devices) = 3 "
                 "and len(chunk_sizes) = 2"):
        gpumux.comm.scatter(source, [0, 1, 2], chunk_sizes=[3, 3])
    out = [array((3, 4), device=1), array((3, 4), device=2)]
    with invalid("'devices' must not be specified when 'out' is specified, but got devices=[1, 2]"):
        gpumux.comm.scatter(source, [1, 2], out=out)
    with invalid("'chunk_sizes' must not be specified when 'out' is specified, but got "
                 "chunk_sizes=[3, 3]"):
        gpumux.comm.scatter(source, chunk_sizes=[3, 3], out=out)
    with pytest.raises(TypeError):
        gpumux.comm.scatter(source)  # torch iterates devices=None too


# ---- gather ----

def test_gather_concatenates_on_the_destination(daemon):
    parts = [array((2, 3), device=0), array((4, 3), device=1, start=6)]
    result = gpumux.comm.gather(parts, destination=2)
    sync()
    assert result.shape == (6, 3) and buffer_of(result).device == 2
    np.testing.assert_array_equal(result, np.arange(18).reshape(6, 3))
    columns = [array((2, 1), device=1), array((2, 2), device=2, start=10)]
    with gpumux.device(1):
        result = gpumux.comm.gather(columns, dim=-1)
    sync()
    assert buffer_of(result).device == 1
    np.testing.assert_array_equal(result, [[0, 10, 11], [1, 12, 13]])


def test_gather_to_host_memory(daemon):
    parts = [array((2, 3), device=2), array((1, 3), device=0, start=6)]
    result = gpumux.comm.gather(parts, destination="cpu")
    assert isinstance(result, np.ndarray) and result.base is None  # this process's own memory
    np.testing.assert_array_equal(result, np.arange(9, dtype=np.float32).reshape(3, 3))
    with pytest.warns(UserWarning, match=r'^Using -1 to represent CPU tensor is deprecated\. '
                                         r'Please use a device object or string instead, e\.g\., '
                                         r'"cpu"\.$'):
        again = gpumux.comm.gather(parts, destination=-1)
    np.testing.assert_array_equal(again, result)
    as_torch = gpumux.comm.gather([tensor((2,), device=1, dtype=torch.bfloat16),
                                   tensor((3,), device=2, dtype=torch.bfloat16, start=2)],
                                  destination=torch.device("cpu"))
    assert as_torch.dtype == torch.bfloat16
    assert gpumux._C._find_buffer(as_torch.data_ptr(), 10) is None
    assert as_torch.tolist() == [0, 1, 2, 3, 4]


def test_gather_into_out(daemon):
    out = array((2, 4), device=2, start=-100)
    parts = [array((2, 1), device=0), array((2, 3), device=1, start=2)]
    assert gpumux.comm.gather(parts, dim=1, out=out) is out
    sync()
    np.testing.assert_array_equal(out, [[0, 2, 3, 4], [1, 5, 6, 7]])


def test_gather_argument_rules(daemon):
    parts = [array((2, 3)), array((2, 3), device=1)]
    with invalid("'destination' must not be specified when 'out' is specified, but got "
                 "destination=1"):
        gpumux.comm.gather(parts, destination=1, out=array((4, 3), device=1))
    uneven = [array((2, 3)), array((2, 4), device=1)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no deprecation warning but for -1
        for destination in (0, "cpu"):
            with invalid("Input tensor at index 1 has invalid shape [2, 4], but expected [2, 3]"):
                gpumux.comm.gather(uneven, destination=destination)
    with invalid("Expected all input tensors to have the same number of dimensions, but tensor at "
                 "index 1has 1 dimensions, (expected 2)"):
        gpumux.comm.gather([array((2, 3)), array((6,), device=1)], destination="cpu")


# ---- what a tensor is ----

def test_tensors_outside_gpumux_memory_or_not_contiguous_are_refused(daemon):
    with pytest.raises(gpumux.InvalidArgumentError, match="is not in gpumux memory"):
        gpumux.comm.broadcast(np.zeros(4, np.float32), [1])
    with invalid("tensor is not contiguous: gpumux.comm takes C-contiguous tensors only (copy it "
                 "into contiguous gpumux memory first)"):
        gpumux.comm.broadcast(array((4, 4))[:, ::2], [1])
    with pytest.raises(TypeError, match=r"^tensors\[1\] must be a tensor in gpumux memory .* not list$"):
        gpumux.comm.gather([array((2,)), [1.0, 2.0]])


def test_tensors_of_another_connection_are_refused(daemon):
    other = gpumux.connect(daemon.address)
    foreign = other.allocate(64, 0)
    with invalid("the tensor's buffer belongs to another Client"):
        gpumux.comm.broadcast(foreign, [1])


def test_parts_of_a_buffer_come_back_as_numpy_views(daemon):
    source = gpumux.allocate(12, device=0)
    source.copy_from(bytes(range(12)))
    chunks = gpumux.comm.scatter(source, [0, 1, 2])
    sync()
    assert [type(c) for c in chunks] == [np.ndarray, gpumux.Buffer, gpumux.Buffer]
    assert chunks[0].tolist() == [0, 1, 2, 3] and buffer_of(chunks[0]) is source
    assert chunks[1].tobytes() == bytes(range(4, 8)) and chunks[2].device == 2


def test_results_keep_their_buffer_alive(daemon):
    result = gpumux.comm.broadcast(array((1024,), device=0), [1])[0]
    as_torch = gpumux.comm.broadcast(tensor((256,), device=0), [2])[0]
    sync()
    assert gpumux.memory_allocated(1) == 4096 and gpumux.memory_allocated(2) == 1024
    assert isinstance(buffer_of(result), gpumux.Buffer)
    np.testing.assert_array_equal(result, np.arange(1024))
    assert torch.equal(as_torch, torch.arange(256, dtype=torch.float32))
    del result, as_torch
    assert gpumux.memory_allocated(1) == 0 and gpumux.memory_allocated(2) == 0
