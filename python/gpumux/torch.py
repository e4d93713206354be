"""PyTorch on gpumux's allocator.

use_gpumux_allocator() makes gpumux PyTorch's CUDA allocator through
CUDAPluggableAllocator (PyTorch 2.0 or later, before the first CUDA
allocation); mem_pool() gives a torch.cuda.MemPool on it for
torch.cuda.use_mem_pool (PyTorch 2.5 or later), so that only chosen regions
allocate from gpumux. The allocator opens its own session for the process,
in local allocation mode: PyTorch's caching algorithm runs in this process,
stream-ordered as PyTorch's is, over segments leased from gpumuxd.

PyTorch calls the functions of libgpumux_torch_alloc.so (built beside this
module against the torch it was built with), which raise torch.OutOfMemoryError
for memory the daemon or the session's limit refuses and RuntimeError for
any other failure, where a plain C allocator could only return NULL. They
call gpumux's allocator C ABI (gpumux/alloc.h), which gpumux._C carries, or
the library $GPUMUX_ALLOC_LIBRARY names (libgpumux_alloc.so): then this
module needs no gpumux._C, built for one Python only.

While gpumux's allocator is installed, torch.cuda.memory_stats(),
memory_allocated(), max_memory_allocated(), memory_reserved(),
max_memory_reserved(), memory_summary(), reset_peak_memory_stats(),
reset_accumulated_memory_stats() and memory_snapshot() report the
session's figures (PyTorch's pluggable allocators have none of their own);
any other process sees them with `gpumux stats` or gpumux.observe().
"""

import ctypes as _ctypes
import json as _json
import os as _os
import threading as _threading

__all__ = [
    "library_path",
    "torch_library_path",
    "use_gpumux_allocator",
    "mem_pool",
    "memory_stats",
    "memory_snapshot",
]

_lock = _threading.Lock()
_allocator = None
_library = None
_glue = None


def library_path():
    """The shared object with gpumux's allocator C ABI (gpumux/alloc.h):
    $GPUMUX_ALLOC_LIBRARY where set, else gpumux's own native module, which
    carries it. (Loading libgpumux_alloc.so as well as gpumux._C in one
    process is refused by protobuf: both register the same descriptors.)"""
    path = _os.environ.get("GPUMUX_ALLOC_LIBRARY")
    if path:
        return path
    from . import _C

    return _C.__file__


def torch_library_path():
    """libgpumux_torch_alloc.so, the functions PyTorch calls:
    $GPUMUX_TORCH_ALLOC_LIBRARY where set, else the one beside this module."""
    return _os.environ.get("GPUMUX_TORCH_ALLOC_LIBRARY") or _os.path.join(
        _os.path.dirname(_os.path.abspath(__file__)), "libgpumux_torch_alloc.so")


def _error(library, what):
    """The C ABI's last error as an exception: gpumux's own class
    (gpumux.GpumuxError's table) where gpumux._C loads, else RuntimeError."""
    message = f"{what}: {library.gpumux_last_error().decode('utf-8', 'replace')}"
    code = library.gpumux_last_error_code()
    try:
        from . import _C
    except ImportError:
        return RuntimeError(message)
    return _C._error_for_code(code, message)


def _load_library():
    global _library
    with _lock:
        if _library is None:
            library = _ctypes.CDLL(library_path())
            library.gpumux_memory_stats_json.restype = _ctypes.c_int
            library.gpumux_memory_stats_json.argtypes = [_ctypes.c_int, _ctypes.c_char_p, _ctypes.c_size_t]
            library.gpumux_memory_snapshot_json.restype = _ctypes.c_int
            library.gpumux_memory_snapshot_json.argtypes = [_ctypes.c_char_p, _ctypes.c_size_t]
            library.gpumux_reset_peak_memory_stats.argtypes = [_ctypes.c_int]
            library.gpumux_reset_accumulated_memory_stats.argtypes = [_ctypes.c_int]
            library.gpumux_backend.restype = _ctypes.c_char_p
            library.gpumux_last_error.restype = _ctypes.c_char_p
            library.gpumux_last_error_code.restype = _ctypes.c_int
            _library = library
        return _library


def _load_glue(library):
    """libgpumux_torch_alloc.so, bound to `library`'s C ABI."""
    global _glue
    with _lock:
        if _glue is None:
            path = torch_library_path()
            if not _os.path.exists(path):
                raise RuntimeError(
                    f"gpumux.torch needs {path}, which gpumux builds where it finds PyTorch's C++ "
                    f"headers for its Python (torch/include): rebuild gpumux with this torch installed, "
                    f"or set GPUMUX_TORCH_ALLOC_LIBRARY")
            glue = _ctypes.CDLL(path)
            glue.gpumux_torch_bind.argtypes = [_ctypes.c_char_p]
            glue.gpumux_torch_bind_error.restype = _ctypes.c_char_p
            if glue.gpumux_torch_bind(library_path().encode()) != 0:
                raise RuntimeError(glue.gpumux_torch_bind_error().decode("utf-8", "replace"))
            _glue = glue
        return _glue


def _check_cuda_backend(library):
    backend = library.gpumux_backend()
    if backend is None:
        raise _error(library, "gpumux.torch")
    if backend != b"cuda":
        raise RuntimeError(
            f"gpumux.torch: the daemon at {_os.environ.get('GPUMUX_ADDRESS') or 'the default socket'} "
            f"runs the {backend.decode()} backend, whose memory is host memory that PyTorch's CUDA "
            f"tensors cannot use; connect to a gpumuxd on a GPU machine (--backend=cuda)")


def _pluggable_allocator():
    import torch

    pluggable = getattr(torch.cuda.memory, "CUDAPluggableAllocator", None)
    library = _load_library()
    _check_cuda_backend(library)
    if pluggable is None:
        raise RuntimeError(
            f"gpumux.torch needs PyTorch 2.0 or later (torch.cuda.memory.CUDAPluggableAllocator); "
            f"this is torch {torch.__version__}")
    if not torch.cuda.is_available():
        raise RuntimeError("gpumux.torch needs a CUDA build of PyTorch and a visible GPU: "
                           "torch.cuda.is_available() is False")
    _load_glue(library)
    global _allocator
    with _lock:
        if _allocator is None:
            allocator = pluggable(torch_library_path(), "gpumux_torch_malloc", "gpumux_torch_free")
            # The optional hooks, where this PyTorch has their setters.
            native = allocator.allocator()
            for setter, name in (("set_init_fn", "gpumux_init"), ("set_reset_fn", "gpumux_empty_cache"),
                                 ("set_memory_fraction_fn", "gpumux_set_memory_fraction"),
                                 ("set_base_alloc_fn", "gpumux_base_allocation"),
                                 ("set_record_stream_fn", "gpumux_record_stream")):
                if hasattr(native, setter):
                    getattr(native, setter)(_ctypes.cast(getattr(library, name), _ctypes.c_void_p).value)
            _allocator = allocator
        return _allocator


def use_gpumux_allocator():
    """Makes gpumux PyTorch's CUDA allocator for this process (before its
    first CUDA allocation: PyTorch refuses to swap an allocator in use), and
    torch.cuda's memory statistics, summary and snapshot report gpumux's
    session. RuntimeError for a daemon on the host backend, a PyTorch without
    CUDAPluggableAllocator or CUDA, or a missing libgpumux_torch_alloc.so."""
    import torch

    allocator = _pluggable_allocator()
    torch.cuda.memory.change_current_allocator(allocator)
    _report_gpumux_figures(torch)


def mem_pool():
    """A torch.cuda.MemPool on gpumux's allocator: `with torch.cuda.use_mem_pool(pool):`
    routes the block's allocations of this thread to gpumux (PyTorch 2.5 or later).
    PyTorch's own allocator keeps the pool's statistics and serves CUDA graphs from it."""
    import torch

    _check_cuda_backend(_load_library())
    pool_class = getattr(torch.cuda, "MemPool", None)
    if pool_class is None:
        raise RuntimeError(f"gpumux.torch.mem_pool needs PyTorch 2.5 or later (torch.cuda.MemPool); "
                           f"this is torch {torch.__version__}")
    return pool_class(_pluggable_allocator().allocator())


def _read_json(function, *args):
    library = _load_library()
    size = 16384
    while True:
        buffer = _ctypes.create_string_buffer(size)
        length = function(*args, buffer, size)
        if length < 0:
            raise _error(library, function.__name__)
        if length < size:
            return _json.loads(buffer.value.decode())
        size = length + 1


def memory_stats(device=0):
    """torch.cuda.memory_stats(device) of the allocator library's session
    (what use_gpumux_allocator's and mem_pool's allocations count in):
    PyTorch's 122 keys."""
    return _read_json(_load_library().gpumux_memory_stats_json, int(device))


def memory_snapshot():
    """torch.cuda.memory_snapshot() of the allocator library's session: its
    segments on every device, with PyTorch's keys."""
    return _read_json(_load_library().gpumux_memory_snapshot_json)


def _nested(flat):
    """torch._C._cuda_memoryStats's nested form of the flat keys, which
    torch.cuda.memory_stats flattens again."""
    nested = {}
    for key, value in flat.items():
        *path, last = key.split(".")
        level = nested
        for part in path:
            level = level.setdefault(part, {})
        level[last] = value
    return nested


def _report_gpumux_figures(torch):
    """torch.cuda's statistics of the pluggable allocator raise "does not yet
    support"; their native entry points report the session's instead."""
    library = _load_library()

    def device_of(device):
        return torch.cuda._utils._get_device_index(device, optional=True)

    def memory_stats_nested(device):
        return _nested(memory_stats(device_of(device)))

    def reset(function):
        def call(device):
            if function(device_of(device)) != 0:
                raise _error(library, function.__name__)
        return call

    def snapshot(*args, **kwargs):
        return {"segments": memory_snapshot(), "device_traces": [[] for _ in range(torch.cuda.device_count())]}

    torch._C._cuda_memoryStats = memory_stats_nested
    torch._C._cuda_resetPeakMemoryStats = reset(library.gpumux_reset_peak_memory_stats)
    torch._C._cuda_resetAccumulatedMemoryStats = reset(library.gpumux_reset_accumulated_memory_stats)
    torch._C._cuda_memorySnapshot = snapshot
