"""PyTorch on gpumux's allocator.

use_gpumux_allocator() makes gpumux's allocator C ABI (client/c_abi, carried
by the native module gpumux._C) PyTorch's CUDA allocator through CUDAPluggableAllocator
(PyTorch 2.0 or later, before the first CUDA allocation); mem_pool() gives
a torch.cuda.MemPool on it for torch.cuda.use_mem_pool (PyTorch 2.5 or
later), so only chosen regions allocate from gpumux. The allocator opens its
own session for the process, and PyTorch's pluggable path keeps no
statistics (torch.cuda.memory_stats raises there): memory_stats() below
reads them from that session, and any other process sees them with
`gpumux stats` or gpumux.observe().
"""

import ctypes as _ctypes
import json as _json
import os as _os
import threading as _threading

__all__ = ["library_path", "use_gpumux_allocator", "mem_pool", "memory_stats"]

_lock = _threading.Lock()
_allocator = None
_library = None


def library_path():
    """The shared object with gpumux's allocator C ABI (gpumux/alloc.h) that
    PyTorch loads: $GPUMUX_ALLOC_LIBRARY where set, else gpumux's own native
    module, which carries it. (Loading libgpumux_alloc.so as well as the
    gpumux package in one process is refused by protobuf: both register the
    same descriptors.)"""
    from . import _C

    return _os.environ.get("GPUMUX_ALLOC_LIBRARY") or _C.__file__


def _load_library():
    global _library
    with _lock:
        if _library is None:
            library = _ctypes.CDLL(library_path())
            library.gpumux_memory_stats_json.restype = _ctypes.c_int
            library.gpumux_memory_stats_json.argtypes = [_ctypes.c_int, _ctypes.c_char_p, _ctypes.c_size_t]
            library.gpumux_last_error.restype = _ctypes.c_char_p
            library.gpumux_last_error_code.restype = _ctypes.c_int
            _library = library
        return _library


def _pluggable_allocator():
    import torch

    pluggable = getattr(torch.cuda.memory, "CUDAPluggableAllocator", None)
    if pluggable is None:
        raise RuntimeError(
            f"gpumux.torch needs PyTorch 2.0 or later (torch.cuda.memory.CUDAPluggableAllocator); "
            f"this is torch {torch.__version__}")
    if not torch.cuda.is_available():
        raise RuntimeError("gpumux.torch needs a CUDA build of PyTorch and a visible GPU: "
                           "torch.cuda.is_available() is False")
    global _allocator
    library = _load_library()
    with _lock:
        if _allocator is None:
            allocator = pluggable(library_path(), "gpumux_malloc", "gpumux_free")
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
    first CUDA allocation: PyTorch refuses to swap an allocator in use).
    RuntimeError on a PyTorch without CUDAPluggableAllocator or CUDA."""
    import torch

    allocator = _pluggable_allocator()
    torch.cuda.memory.change_current_allocator(allocator)


def mem_pool():
    """A torch.cuda.MemPool on gpumux's allocator: `with torch.cuda.use_mem_pool(pool):`
    routes the block's allocations of this thread to gpumux (PyTorch 2.5 or later)."""
    import torch

    pool_class = getattr(torch.cuda, "MemPool", None)
    if pool_class is None:
        raise RuntimeError(f"gpumux.torch.mem_pool needs PyTorch 2.5 or later (torch.cuda.MemPool); "
                           f"this is torch {torch.__version__}")
    return pool_class(_pluggable_allocator().allocator())


def memory_stats(device=0):
    """torch.cuda.memory_stats(device) of the allocator library's session
    (what use_gpumux_allocator's and mem_pool's allocations count in):
    PyTorch's 122 keys. gpumux.GpumuxError subclasses as gpumux raises them."""
    from . import _C

    library = _load_library()
    size = 16384
    while True:
        buffer = _ctypes.create_string_buffer(size)
        length = library.gpumux_memory_stats_json(int(device), buffer, size)
        if length < 0:
            message = library.gpumux_last_error().decode("utf-8", "replace")
            raise _C._error_for_code(library.gpumux_last_error_code(), message)
        if length < size:
            return _json.loads(buffer.value.decode())
        size = length + 1
