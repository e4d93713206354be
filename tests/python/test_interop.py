"""Zero-copy views of host-backend buffers: the buffer protocol, numpy's
__array_interface__ and DLPack (numpy and torch), within a process and
across processes through a share token."""

import gc

import numpy as np
import pytest

import gpumux
from conftest import run_python

torch = pytest.importorskip("torch")
MiB = 1 << 20


def test_numpy_and_torch_views_share_the_memory(daemon):
    buffer = gpumux.allocate(MiB)
    array = np.asarray(buffer)
    assert array.dtype == np.uint8 and array.shape == (MiB,)
    assert array.ctypes.data == buffer.ptr
    interface = buffer.__array_interface__
    assert interface == {"shape": (MiB,), "typestr": "|u1", "data": (buffer.ptr, False),
                         "strides": None, "version": 3}
    array[:4] = [1, 2, 3, 4]
    assert buffer.tobytes(0, 4) == b"\x01\x02\x03\x04"
    tensor = torch.from_dlpack(buffer)
    assert tensor.data_ptr() == buffer.ptr and tensor.dtype == torch.uint8 and tensor.numel() == MiB
    tensor[4:8] = 9
    assert buffer.tobytes(4, 4) == b"\x09" * 4
    view = memoryview(buffer)
    assert not view.readonly and view.nbytes == MiB
    view[8] = 42
    assert array[8] == 42
    assert buffer.__dlpack_device__() == (1, 0)
    assert not hasattr(buffer, "__cuda_array_interface__")
    floats = torch.from_dlpack(buffer).view(torch.float32)
    floats[:] = 1.5
    assert np.frombuffer(buffer.tobytes(0, 8), dtype=np.float32).tolist() == [1.5, 1.5]


def test_views_keep_the_buffer_alive(daemon):
    array = np.asarray(gpumux.allocate(MiB))
    tensor = torch.from_dlpack(gpumux.allocate(2 * MiB))
    view = memoryview(gpumux.allocate(4 * MiB))
    gc.collect()
    assert gpumux.memory_allocated() == 7 * MiB
    array[:] = 1
    tensor[:] = 2
    del array
    gc.collect()
    assert gpumux.memory_allocated() == 6 * MiB
    del tensor
    gc.collect()
    assert gpumux.memory_allocated() == 4 * MiB
    view.release()
    del view
    gc.collect()
    assert gpumux.memory_allocated() == 0


def test_free_refuses_while_views_use_the_memory(daemon):
    buffer = gpumux.allocate(MiB)
    array = np.asarray(buffer)
    tensor = torch.from_dlpack(buffer)
    with pytest.raises(BufferError, match="cannot free the buffer: 2 view"):
        buffer.free()
    del array
    gc.collect()
    with pytest.raises(BufferError, match="cannot free the buffer: 1 view"):
        buffer.free()
    del tensor
    gc.collect()
    buffer.free()
    assert buffer.freed and gpumux.memory_allocated() == 0
    with gpumux.allocate(MiB) as scoped:
        escaped = np.asarray(scoped)
    escaped[:] = 3  # the view outlives the block, and so does the memory
    assert gpumux.memory_allocated() == MiB
    del scoped, escaped
    gc.collect()
    assert gpumux.memory_allocated() == 0


def test_dlpack_capsules(daemon):
    buffer = gpumux.allocate(4096)
    capsule = buffer.__dlpack__()
    del buffer
    gc.collect()
    assert gpumux.memory_allocated() == 4096  # the unconsumed capsule owns a reference
    del capsule
    gc.collect()
    assert gpumux.memory_allocated() == 0
    buffer = gpumux.allocate(4096)
    with pytest.raises(ValueError, match="stream must be None for host memory"):
        buffer.__dlpack__(stream=1)
    with pytest.raises(TypeError):
        buffer.__dlpack__(stream="s")
    with pytest.raises(BufferError, match=r"dl_device \(2, 0\) is not the buffer's \(1, 0\)"):
        buffer.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError, match="copy=True is not supported"):
        buffer.__dlpack__(copy=True)
    assert torch.utils.dlpack.from_dlpack(buffer.__dlpack__(max_version=(1, 0), dl_device=(1, 0))).numel() == 4096
    buffer.free()
    with pytest.raises(ValueError, match="freed"):
        np.asarray(buffer)


def test_a_second_process_reads_the_same_bytes_without_a_copy(daemon):
    buffer = gpumux.allocate(MiB, shareable=True)
    np.asarray(buffer)[:] = np.arange(MiB, dtype=np.uint64).astype(np.uint8)
    token = buffer.share()
    out = run_python(
        "import gpumux, numpy as np, torch\n"
        f"b = gpumux.import_buffer({token!r})\n"
        "a = np.asarray(b)\n"
        "t = torch.from_dlpack(b)\n"
        "assert a.ctypes.data == b.ptr and t.data_ptr() == b.ptr\n"
        "expected = np.arange(1 << 20, dtype=np.uint64).astype(np.uint8)\n"
        "print(bool((a == expected).all()), bool((t.numpy() == expected).all()))\n"
        "t[:3] = 200\n",
        daemon.env())
    assert out.split() == ["True", "True"]
    assert np.asarray(buffer)[:4].tolist() == [200, 200, 200, 3]


def test_numpy_writes_then_torch_reads_in_another_process(daemon):
    buffer = gpumux.allocate(4 * 1024, shareable=True)
    weights = np.asarray(buffer).view(np.float32)
    weights[:] = np.linspace(0, 1, weights.size, dtype=np.float32)
    token = buffer.share()
    out = run_python(
        "import gpumux, torch\n"
        f"t = torch.from_dlpack(gpumux.import_buffer({token!r})).view(torch.float32)\n"
        "print(f'{t.sum().item():.3f}')\n",
        daemon.env())
    assert float(out) == pytest.approx(float(weights.sum()), rel=1e-5)
