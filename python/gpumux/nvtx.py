"""torch.cuda.nvtx: annotations the daemon records on the session's device
timeline (ranges nest per thread)."""

from contextlib import contextmanager

from ._core import _lazy_client

__all__ = ["mark", "range_push", "range_pop", "range"]


def mark(msg):
    """nvtx.mark(msg): an instantaneous event."""
    _lazy_client().nvtx_mark(msg)


def range_push(msg):
    """nvtx.range_push(msg): starts a nested range; returns its zero-based depth."""
    return _lazy_client().nvtx_range_push(msg)


def range_pop():
    """nvtx.range_pop(): ends the innermost range; returns its depth."""
    return _lazy_client().nvtx_range_pop()


@contextmanager
def range(msg, *args, **kwargs):  # noqa: A001 (torch's name)
    """nvtx.range(msg, *args, **kwargs): a range around a block or function,
    with msg.format(*args, **kwargs)."""
    range_push(msg.format(*args, **kwargs))
    try:
        yield
    finally:
        range_pop()
