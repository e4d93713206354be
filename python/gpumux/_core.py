"""gpumux's device and state functions in torch.cuda's shape (the package's
top level, gpumux/__init__.py, re-exports them): the default connection,
devices, the current device, and their context managers."""

import atexit as _atexit
import os as _os
import threading as _threading

from . import _C
from ._C import (
    AbortedError,
    AlreadyExistsError,
    Buffer,
    CancelledError,
    Client,
    DataLossError,
    DeadlineExceededError,
    DeviceProperties,
    FailedPreconditionError,
    GpumuxError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    Observer,
    OutOfMemoryError,
    OutOfRangeError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
    UnimplementedError,
    UnknownError,
)

__version__ = "0.1.0"

_lock = _threading.Lock()
# The default connection lives in _C (_C._default_client()), where
# gpumux.allocate reads it; cleared at exit, so that its session closes
# while the interpreter still runs.
_atexit.register(_C._set_default_client, None)
# Connections of the parent in a forked child: kept (never destroyed, their
# gRPC state belongs to the parent) and unusable, as CUDA is after fork.
_forked_connections = []
_in_forked_child = False


def _after_fork_in_child():
    global _in_forked_child, _lock
    _lock = _threading.Lock()  # another thread may have held it at the fork
    client = _C._default_client()
    if client is not None:
        _forked_connections.append(client)
        _C._set_default_client(None)
        _in_forked_child = True


_os.register_at_fork(after_in_child=_after_fork_in_child)


def default_address():
    """$GPUMUX_ADDRESS where set, else the daemon's default socket."""
    return _os.environ.get("GPUMUX_ADDRESS") or _C._default_address()


def connect(address=None, *, client_name="", tenant="", labels=None, allocation=None, timeout=5.0):
    """Opens a session with the daemon at `address` (default_address() when None).

    client_name, tenant and labels name the session to operators (empty: the
    GPUMUX_CLIENT_NAME, GPUMUX_TENANT and GPUMUX_LABELS variables, then the
    process name). allocation: "local" (the default: this process carves its
    allocations from segments it leases) or "daemon" (every allocation is a
    request). Raises UnavailableError when no daemon answers.
    """
    if _in_forked_child:
        raise RuntimeError(
            "Cannot re-initialize gpumux in forked subprocess: the parent had connected. To use "
            "gpumux with multiprocessing, you must use the 'spawn' start method")
    timeout = float(timeout)
    if not timeout > 0 or timeout == float("inf"):
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout}")
    return _C._connect(address or default_address(), client_name, tenant, dict(labels or {}),
                       allocation, timeout)


def _lazy_client():
    client = _C._default_client()
    if client is None:
        client = _connect_default()
    return client


def _connect_default():
    with _lock:
        client = _C._default_client()
        if client is None:
            client = connect()
            _C._set_default_client(client)
            _run_queued_seed_calls(client)
        return client


# torch.cuda's lazy seeding: manual_seed, manual_seed_all, seed and seed_all
# called before the default connection is made wait for it, the latest of
# each kind (current device, all devices) in the order they were called, as
# PyTorch's wait for CUDA's initialisation. Where no daemon ever answers they
# never run: silently ignored, as PyTorch's are without CUDA.
_queued_seed_calls = {}


def _lazy_seed_call(kind, call):
    """call(client) now on the default connection, or queued under `kind`
    ("seed" or "seed_all") until it is made; returns call's result or None."""
    with _lock:
        client = _C._default_client()
        if client is None:
            _queued_seed_calls.pop(kind, None)
            _queued_seed_calls[kind] = call  # after the other kind's, if later
            return None
    return call(client)


def _run_queued_seed_calls(client):
    calls = list(_queued_seed_calls.values())
    _queued_seed_calls.clear()
    for call in calls:
        call(client)


def set_default_client(client):
    """Makes `client` (from connect()) the one the module functions use; None
    drops the default connection, so the next call connects again."""
    if client is not None and not isinstance(client, Client):
        raise TypeError(f"set_default_client expects a gpumux.Client or None, got {type(client).__name__}")
    with _lock:
        _C._set_default_client(client)
        if client is not None:
            _run_queued_seed_calls(client)


def default_client():
    """The default connection, made now if needed (torch.cuda's lazy init)."""
    return _lazy_client()


def init():
    """torch.cuda.init(): connects and initialises now what calls otherwise
    do on first use. Raises UnavailableError when the daemon cannot be reached."""
    _lazy_client().init()


def is_initialized():
    """torch.cuda.is_initialized(): whether the default connection is made and initialised."""
    client = _C._default_client()
    return client is not None and client.is_initialized()


def is_available():
    """torch.cuda.is_available(): whether a daemon answers and has a device. Never raises."""
    client = _C._default_client()
    if client is not None:
        try:
            return client.device_count() > 0
        except GpumuxError:
            return False
    return _C._is_available(default_address(), 2.0)


def _device_index(device, optional=False):
    """The daemon's device index for `device`: None (the current device),
    an int, "cuda", "cuda:N", "gpumux:N", a torch.device, or a gpumux.device."""
    if device is None:
        return None if optional else _lazy_client().current_device()
    if isinstance(device, bool):
        raise TypeError("device must be an int, a str, a torch.device or None, not bool")
    if isinstance(device, int):
        if device < 0:
            raise ValueError(f"Expected a non-negative device index, got {device}")
        return device
    if isinstance(device, str):
        kind, _, index = device.partition(":")
        if kind not in ("cuda", "gpumux"):
            raise ValueError(f"Expected a cuda device, but got: {device}")
        if not index:
            return None if optional else _lazy_client().current_device()
        if not index.isdigit():
            raise ValueError(f"Invalid device string: '{device}'")
        return int(index)
    if isinstance(device, _device_context):
        return device.idx
    kind = getattr(device, "type", None)
    if kind is not None and hasattr(device, "index"):  # torch.device
        if kind not in ("cuda", "gpumux"):
            raise ValueError(f"Expected a cuda device, but got: {device}")
        if device.index is None:
            return None if optional else _lazy_client().current_device()
        return device.index
    raise TypeError(f"device must be an int, a str, a torch.device or None, not {type(device).__name__}")


def device_count():
    """torch.cuda.device_count(): the daemon's devices; 0 when no daemon answers."""
    try:
        return _lazy_client().device_count()
    except UnavailableError:
        return 0


def current_device():
    """torch.cuda.current_device(): this thread's current device."""
    return _lazy_client().current_device()


def _negative_int(device):
    return isinstance(device, int) and not isinstance(device, bool) and device < 0


def set_device(device):
    """torch.cuda.set_device(device): this thread's current device. A
    negative int is ignored, as torch does."""
    if _negative_int(device):
        return
    _lazy_client().set_device(_device_index(device))


def get_device_name(device=None):
    """torch.cuda.get_device_name(device=None)."""
    return _lazy_client().get_device_name(_device_index(device))


def get_device_capability(device=None):
    """torch.cuda.get_device_capability(device=None): (major, minor); (0, 0) on the host backend."""
    return tuple(_lazy_client().get_device_capability(_device_index(device)))


def get_device_properties(device=None):
    """torch.cuda.get_device_properties(device): name, total_memory, major,
    minor, multi_processor_count, and gpumux's backend, free_memory, health."""
    return _lazy_client().get_device_properties(_device_index(device))


def get_arch_list():
    """torch.cuda.get_arch_list(): the daemon's CUDA architectures; [] without CUDA."""
    return list(_lazy_client().get_arch_list())


def get_gencode_flags():
    """torch.cuda.get_gencode_flags() of the daemon's build; "" without CUDA."""
    return _lazy_client().get_gencode_flags()


def synchronize(device=None):
    """torch.cuda.synchronize(device=None): waits for all work queued on the device."""
    _lazy_client().synchronize(_device_index(device))


def current_blas_handle():
    """torch.cuda.current_blas_handle(): the cuBLAS handle (an int) of the
    current device and thread. FailedPreconditionError on the host backend."""
    return _lazy_client().current_blas_handle()


def ipc_collect():
    """torch.cuda.ipc_collect(): unmaps the segments no live buffer of this
    process points into. Returns (mappings, bytes) unmapped."""
    return tuple(_lazy_client().ipc_collect())


class device:
    """torch.cuda.device(device): a context manager that makes `device` current.

    Leaving it restores the device that was current. None or a negative index
    changes nothing."""

    def __init__(self, device):
        self.idx = -1 if device is None or _negative_int(device) else _device_index(device)
        self.prev_idx = -1

    def __enter__(self):
        if self.idx < 0:
            return self
        client = _lazy_client()
        self.prev_idx = client.current_device()
        if self.idx != self.prev_idx:
            client.set_device(self.idx)
        return self

    def __exit__(self, *exc):
        if self.idx >= 0 and self.prev_idx != self.idx:
            _lazy_client().set_device(self.prev_idx)
        return False


_device_context = device


class device_of(device):
    """torch.cuda.device_of(obj): the device of a Buffer (or anything with a
    `device` index or torch tensor on cuda) made current for a scope."""

    def __init__(self, obj):
        where = getattr(obj, "device", None)
        if isinstance(where, int):
            super().__init__(where)
        elif where is not None and getattr(where, "type", None) in ("cuda", "gpumux"):
            super().__init__(where)
        else:
            super().__init__(None)
