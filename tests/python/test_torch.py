"""gpumux.torch: PyTorch's allocator hooks and the allocator library's statistics.

This machine's torch (Debian's 1.13, CPU) predates CUDAPluggableAllocator,
so here the refusals, the statistics path, the package without its native
module and the functions PyTorch calls (from C++ built against this torch,
as PyTorch calls them) run; training on gpumux's allocator needs CUDA
PyTorch 2.x and a GPU (test_gpu.py).
"""

import os
import shutil
import subprocess

import pytest

import gpumux
import gpumux.torch
from conftest import run_python

torch = pytest.importorskip("torch")


ALLOC_LIBRARY = os.environ.get("GPUMUX_TEST_ALLOC_LIBRARY", "")
TORCH_ALLOC_CHECK = os.environ.get("GPUMUX_TEST_TORCH_ALLOC_CHECK", "")


def test_a_daemon_on_the_host_backend_is_refused(daemon):
    with pytest.raises(RuntimeError, match="runs the host backend, whose memory is host memory"):
        gpumux.torch.use_gpumux_allocator()
    with pytest.raises(RuntimeError, match="runs the host backend"):
        gpumux.torch.mem_pool()


@pytest.mark.skipif(hasattr(torch.cuda.memory, "CUDAPluggableAllocator"),
                    reason="this torch has CUDAPluggableAllocator")
def test_an_old_torch_is_refused_with_its_version(daemon, monkeypatch):
    monkeypatch.setattr(gpumux.torch, "_check_cuda_backend", lambda library: None)
    with pytest.raises(RuntimeError, match=f"needs PyTorch 2.0 or later .*this is torch {torch.__version__}"):
        gpumux.torch.use_gpumux_allocator()
    with pytest.raises(RuntimeError, match="needs PyTorch 2.5 or later"):
        gpumux.torch.mem_pool()


def test_the_library_is_found():
    assert gpumux.torch.library_path() == gpumux._C.__file__


def test_memory_stats_come_from_the_allocator_librarys_session(daemon):
    out = run_python(
        "import ctypes, gpumux.torch\n"
        "lib = ctypes.CDLL(gpumux.torch.library_path())\n"
        "lib.gpumux_malloc.restype = ctypes.c_void_p\n"
        "p = lib.gpumux_malloc(ctypes.c_size_t(3 << 20), 1, None)\n"
        "assert p\n"
        "stats = gpumux.torch.memory_stats(1)\n"
        "print(stats['allocated_bytes.all.current'], len(stats))\n"
        "try:\n"
        "    gpumux.torch.memory_stats(7)\n"
        "except gpumux.InvalidArgumentError as e:\n"
        "    print(e.code)\n",
        daemon.env())
    assert out.split() == [str(3 << 20), "122", "INVALID_ARGUMENT"]


@pytest.mark.skipif(not ALLOC_LIBRARY, reason="no libgpumux_alloc.so")
def test_gpumux_torch_needs_only_the_allocator_library(daemon, tmp_path):
    # The package as a Python without a matching gpumux._C sees it: the
    # pure-Python modules only, and GPUMUX_ALLOC_LIBRARY.
    package = tmp_path / "gpumux"
    package.mkdir()
    source = os.path.dirname(gpumux.__file__)
    for name in os.listdir(source):
        if name.endswith(".py"):
            shutil.copy(os.path.join(source, name), package / name)
    out = run_python(
        "import ctypes, gpumux.torch\n"
        "lib = ctypes.CDLL(gpumux.torch.library_path())\n"
        "lib.gpumux_malloc.restype = ctypes.c_void_p\n"
        "assert lib.gpumux_malloc(ctypes.c_size_t(1 << 20), 0, None)\n"
        "print(gpumux.torch.memory_stats(0)['allocated_bytes.all.current'])\n"
        "print(len(gpumux.torch.memory_snapshot()))\n"
        "import gpumux\n"
        "try:\n"
        "    gpumux.connect\n"
        "except ImportError as e:\n"
        "    print('native' if 'needs gpumux\\'s native module gpumux._C' in str(e) else e)\n",
        daemon.env(PYTHONPATH=str(tmp_path), GPUMUX_ALLOC_LIBRARY=ALLOC_LIBRARY))
    assert out.split() == [str(1 << 20), "1", "native"]


def check_torch_allocation(daemon_env, size, count):
    glue = gpumux.torch.torch_library_path()
    done = subprocess.run([TORCH_ALLOC_CHECK, glue, ALLOC_LIBRARY, str(size), str(count)],
                          env=daemon_env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.skipif(not TORCH_ALLOC_CHECK, reason="libgpumux_torch_alloc.so is not built")
def test_pytorchs_allocation_function_raises_torchs_out_of_memory(daemon):
    assert check_torch_allocation(daemon.env(), 256 << 20, 2) == "ok 2"
    # The device has 1 GiB: the fifth 256 MiB block cannot fit.
    out = check_torch_allocation(daemon.env(), 256 << 20, 8)
    assert out.startswith("OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB"), out


@pytest.mark.skipif(not TORCH_ALLOC_CHECK, reason="libgpumux_torch_alloc.so is not built")
def test_pytorchs_allocation_function_raises_when_no_daemon_answers(tmp_path):
    env = dict(os.environ, GPUMUX_ADDRESS=f"unix://{tmp_path}/nobody.sock")
    out = check_torch_allocation(env, 1 << 20, 1)
    assert out.startswith("Error: gpumux: "), out
    assert "nobody.sock" in out


def test_torch_cuda_memory_functions_report_the_allocator_session(daemon, monkeypatch):
    # What use_gpumux_allocator() does to torch.cuda's statistics, on this
    # CPU torch: its entry points report the C ABI's session.
    for name in ("_cuda_memoryStats", "_cuda_resetPeakMemoryStats",
                 "_cuda_resetAccumulatedMemoryStats", "_cuda_memorySnapshot"):
        monkeypatch.setattr(torch._C, name, getattr(torch._C, name, None), raising=False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda.memory, "is_initialized", lambda: True, raising=False)
    gpumux.torch._report_gpumux_figures(torch)
    import ctypes
    library = gpumux.torch._load_library()
    library.gpumux_malloc.restype = ctypes.c_void_p
    pointer = library.gpumux_malloc(ctypes.c_size_t(5 << 20), 1, None)
    assert pointer
    assert torch.cuda.memory_allocated(1) == 5 << 20
    assert torch.cuda.memory_stats(1)["allocation.all.current"] == 1
    assert torch.cuda.max_memory_reserved(1) >= 5 << 20
    assert "Allocated memory" in torch.cuda.memory_summary(1)
    snapshot = torch._C._cuda_memorySnapshot()
    assert [s["device"] for s in snapshot["segments"]] == [1]
    library.gpumux_free(ctypes.c_void_p(pointer), ctypes.c_size_t(5 << 20), 1, None)
    torch.cuda.reset_peak_memory_stats(1)
    assert torch.cuda.max_memory_allocated(1) == 0
