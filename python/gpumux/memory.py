"""Memory: buffers, sharing, and torch.cuda's memory statistics and cache.

The statistics are gpumux's books for this process's session, with
PyTorch's keys, figures and table; `observe()` gives an operator's view of
every session of the daemon.
"""

import warnings as _warnings

from . import _C
from ._core import _device_index, _lazy_client, default_address

__all__ = [
    "allocate", "import_buffer", "observe", "empty_cache", "memory_stats", "memory_summary",
    "memory_snapshot", "memory_allocated", "max_memory_allocated", "memory_reserved",
    "max_memory_reserved", "reset_peak_memory_stats", "reset_max_memory_allocated",
    "reset_accumulated_memory_stats", "memory_cached", "max_memory_cached",
    "reset_max_memory_cached", "set_per_process_memory_fraction", "set_memory_limit",
    "list_gpu_processes", "mem_get_info",
]


# Native, with the same arguments as Client.allocate and gpumux's default
# connection: the allocation that PyTorch code makes most, at no Python
# frame's cost (bench/python/alloc_bench.py).
allocate = _C.allocate


def import_buffer(token):
    """The buffer another process shared (Buffer.share()), mapped here. The
    memory lives until every holder freed it. Tokens are single-use:
    FailedPreconditionError for one already used, NotFoundError for one whose
    allocation is gone, InvalidArgumentError for a malformed one."""
    if not isinstance(token, str):
        raise TypeError(f"token must be a str, not {type(token).__name__}")
    return _lazy_client().import_buffer(token)


def observe(address=None):
    """An operator's read-only view of the daemon at `address` (default:
    default_address()): gpumux.Observer."""
    return _C.Observer(address or default_address())


def empty_cache(device=None, all_sessions=False):
    """torch.cuda.empty_cache(): releases the cached, unused segments of this
    session (every device, or `device`); all_sessions=True asks every session
    (an operator's action). Returns (bytes, segments) released."""
    index = _device_index(device, optional=True)
    return tuple(_lazy_client().empty_cache(index, all_sessions))


def memory_stats(device=None):
    """torch.cuda.memory_stats(device=None): PyTorch's 122 keys, sorted, for
    this session on the device."""
    return _lazy_client().memory_stats(_device_index(device))


def memory_summary(device=None, abbreviated=False):
    """torch.cuda.memory_summary(device=None, abbreviated=False): PyTorch's table."""
    return _lazy_client().memory_summary(_device_index(device), abbreviated)


def memory_snapshot():
    """torch.cuda.memory_snapshot(): this session's segments on every device,
    as PyTorch's dicts (plus session_id, segment_id, shareable, leased)."""
    return _lazy_client().memory_snapshot(None)


def memory_allocated(device=None):
    """torch.cuda.memory_allocated(device=None): allocated_bytes.all.current."""
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device=None):
    """torch.cuda.max_memory_allocated(device=None): allocated_bytes.all.peak."""
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device=None):
    """torch.cuda.memory_reserved(device=None): reserved_bytes.all.current."""
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device=None):
    """torch.cuda.max_memory_reserved(device=None): reserved_bytes.all.peak."""
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device=None):
    """torch.cuda.reset_peak_memory_stats(device=None): every peak back to its current value."""
    _lazy_client().reset_peak_memory_stats(_device_index(device))


def reset_max_memory_allocated(device=None):
    """torch.cuda.reset_max_memory_allocated(device=None): resets every peak, as torch does."""
    _warnings.warn(
        "torch.cuda.reset_max_memory_allocated now calls torch.cuda.reset_peak_memory_stats, "
        "which resets /all/ peak memory stats.", FutureWarning, stacklevel=2)
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device=None):
    """torch.cuda.reset_accumulated_memory_stats(device=None): the allocated
    and freed counters back to 0."""
    _lazy_client().reset_accumulated_memory_stats(_device_index(device))


def memory_cached(device=None):
    """Deprecated: memory_reserved."""
    _warnings.warn("torch.cuda.memory_cached has been renamed to torch.cuda.memory_reserved",
                   FutureWarning, stacklevel=2)
    return memory_reserved(device)


def max_memory_cached(device=None):
    """Deprecated: max_memory_reserved."""
    _warnings.warn("torch.cuda.max_memory_cached has been renamed to torch.cuda.max_memory_reserved",
                   FutureWarning, stacklevel=2)
    return max_memory_reserved(device)


def reset_max_memory_cached(device=None):
    """Deprecated: reset_peak_memory_stats."""
    _warnings.warn(
        "torch.cuda.reset_max_memory_cached now calls torch.cuda.reset_peak_memory_stats, "
        "which resets /all/ peak memory stats.", FutureWarning, stacklevel=2)
    reset_peak_memory_stats(device)


def set_per_process_memory_fraction(fraction, device=None):
    """torch.cuda.set_per_process_memory_fraction(fraction, device=None):
    caps this session's reserved bytes on the device at fraction x total.
    ValueError "Invalid fraction value: ..." outside [0, 1]; TypeError for a
    non-float, as torch."""
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    _lazy_client().set_per_process_memory_fraction(fraction, _device_index(device))


def set_memory_limit(nbytes, device=None):
    """The same cap in bytes; 0 removes it."""
    _lazy_client().set_memory_limit(nbytes, _device_index(device))


def mem_get_info(device=None):
    """torch.cuda.mem_get_info(device=None): (free, total) bytes of the device."""
    properties = _lazy_client().get_device_properties(_device_index(device))
    return properties.free_memory, properties.total_memory


def list_gpu_processes(device=None):
    """torch.cuda.list_gpu_processes(device=None): the daemon's sessions that
    hold memory on the device, one line each, as torch's text."""
    index = _device_index(device)
    client = _lazy_client()
    lines = [f"GPU:{index}"]
    sessions = observe(client.address).list_sessions()
    holding = [s for s in sessions if len(s["devices"]) > index and s["devices"][index]["reserved_bytes"]]
    if not holding:
        lines.append("no processes are running")
    for session in holding:
        mib = session["devices"][index]["reserved_bytes"] / (1024 * 1024)
        lines.append(f"process {session['pid']:>10d} uses {mib:12.3f} MB GPU memory")
    return "\n".join(lines)
