"""gpumux: torch.cuda's API over gpumuxd, the GPU daemon many processes share.

Device memory, streams, events and random generators belong to the daemon;
this process holds a session with it and maps the memory it is given. The
module functions have torch.cuda's names and signatures and work on a
default connection, made on first use as torch.cuda initialises lazily
(address: $GPUMUX_ADDRESS, else the daemon's default socket); `connect()`
opens more. Errors are the exceptions of gpumux.GpumuxError's table (README,
"Python").
"""

try:
    from . import _C
except ImportError as _error:
    # gpumux._C is built for one Python version. gpumux.torch needs only the
    # allocator library, which GPUMUX_ALLOC_LIBRARY can name: it still
    # imports; everything else says why it cannot.
    _native_error = _error
    __version__ = "0.1.0"

    def __getattr__(name):
        raise ImportError(
            f"gpumux.{name} needs gpumux's native module gpumux._C, which did not load: {_native_error} "
            f"(gpumux.torch works without it where GPUMUX_ALLOC_LIBRARY names libgpumux_alloc.so)"
        ) from _native_error

else:
    from ._core import *  # noqa: F401,F403
    from ._core import __version__  # noqa: F401
    from .memory import *  # noqa: F401,F403
    from .memory import allocate, import_buffer, observe  # noqa: F401
    from .random import *  # noqa: F401,F403
    from .streams import (  # noqa: F401
        Event,
        Stream,
        StreamContext,
        current_stream,
        default_stream,
        set_stream,
        stream,
    )
    from . import comm, nvtx  # noqa: F401
