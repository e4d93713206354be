"""gpumux.torch: PyTorch's allocator hooks and the allocator library's statistics.

This machine's torch (Debian's 1.13, CPU) predates CUDAPluggableAllocator,
so here only the refusals and the statistics path run; training on gpumux's
allocator needs CUDA PyTorch 2.x and a GPU.
"""

import pytest

import gpumux
import gpumux.torch
from conftest import run_python

torch = pytest.importorskip("torch")


@pytest.mark.skipif(hasattr(torch.cuda.memory, "CUDAPluggableAllocator"),
                    reason="this torch has CUDAPluggableAllocator")
def test_an_old_torch_is_refused_with_its_version(daemon):
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
