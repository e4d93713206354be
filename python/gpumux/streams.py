"""torch.cuda.Stream and torch.cuda.Event on the daemon's streams and events.

A Stream made with Stream(...) is the session's own and is destroyed when
its last reference goes (set_stream and the stream context keep it while it
is current); current_stream() and default_stream() return handles to
streams that already exist, which dropping does not destroy. Events are
destroyed when dropped.
"""

import threading as _threading

from . import _C
from ._core import _device_index, _lazy_client, _negative_int

__all__ = ["Stream", "Event", "StreamContext", "stream", "current_stream", "default_stream",
           "set_stream"]

# The Stream objects each thread made current, by (client, device), so that
# a current stream lives while it is current and current_stream() returns
# the very object.
_current = _threading.local()


def _current_streams():
    streams = getattr(_current, "streams", None)
    if streams is None:
        streams = _current.streams = {}
    return streams


class Stream(_C._Stream):
    """torch.cuda.Stream(device=None, priority=0): a new stream of this
    session on the device. Lower numbers are higher priorities (see
    priority_range); out-of-range priorities are clamped.

    Stream(stream_id=N, device_index=D) wraps an existing stream instead.
    """

    def __init__(self, device=None, priority=0, *, stream_id=None, device_index=None, client=None):
        client = client or _lazy_client()
        if stream_id is not None:
            index = device_index if device_index is not None else _device_index(device)
            super().__init__(client, index, priority, stream_id)
        else:
            if _negative_int(device):  # torch.cuda.Stream(-1): as device(-1), the current device
                device = None
            super().__init__(client, _resolve(device, client), priority, None)
        self._client = client

    @property
    def device(self):
        """The device index the stream belongs to."""
        return self.device_index

    @staticmethod
    def priority_range(device=None):
        """(least, greatest) priority of the device's streams; greatest <= least."""
        client = _lazy_client()
        return tuple(client.stream_priority_range(_resolve(device, client)))

    def record_event(self, event=None):
        """Records `event` (a new Event when None) on this stream and returns it."""
        if event is None:
            event = Event(client=self._client)
        event.record(self)
        return event

    def __repr__(self):
        return f"<gpumux.Stream device={self.device_index} stream_id={self.stream_id} priority={self.priority}>"


class Event(_C._Event):
    """torch.cuda.Event(enable_timing=False, blocking=False, interprocess=False).

    Created on the daemon when first recorded, on the stream's device.
    interprocess events give ipc_handle() bytes that another process opens
    with Event.from_ipc_handle(device, handle); they cannot also time.
    """

    def __init__(self, enable_timing=False, blocking=False, interprocess=False, *, client=None):
        client = client or _lazy_client()
        super().__init__(client, enable_timing, blocking, interprocess, None, None)
        self._client = client

    @classmethod
    def from_ipc_handle(cls, device, handle):
        """Opens another session's interprocess event on `device`. InvalidArgumentError
        "cudaIpcEventHandle_t expects byte-like object of size 64, but got N"."""
        client = _lazy_client()
        event = cls.__new__(cls)
        _C._Event.__init__(event, client, False, False, True, _resolve(device, client), bytes(handle))
        event._client = client
        return event

    @property
    def device(self):
        """The device the event was created on; None before its first record."""
        return self.device_index

    def record(self, stream=None):
        """Captures the work queued so far on `stream` (None: the current stream)."""
        super().record(stream)

    def wait(self, stream=None):
        """Makes `stream` (None: the current stream) wait for the captured work."""
        super().wait(stream)

    def __repr__(self):
        state = "uninitialized" if self.device_index is None else f"device={self.device_index}"
        return f"<gpumux.Event {state}>"


def _resolve(device, client):
    if device is None:
        return client.current_device()
    return _device_index(device)


def current_stream(device=None):
    """torch.cuda.current_stream(device=None): this thread's current stream
    of the device (its default stream until set_stream)."""
    client = _lazy_client()
    return _current_stream(client, _resolve(device, client))


def _current_stream(client, index):
    stream_id, priority = client.current_stream_id(index)
    held = _current_streams().get((id(client), index))
    if held is not None and held.stream_id == stream_id:
        return held
    return Stream(None, priority, stream_id=stream_id, device_index=index, client=client)


def default_stream(device=None):
    """torch.cuda.default_stream(device=None): the session's stream 0 of the device."""
    client = _lazy_client()
    return Stream(stream_id=0, device_index=_resolve(device, client), client=client)


def set_stream(stream):
    """torch.cuda.set_stream(stream): makes `stream` current on its device,
    and its device current, for this thread. None changes nothing."""
    if stream is None:
        return
    client = stream._client
    client.set_stream(stream)
    _current_streams()[(id(client), stream.device_index)] = stream


class StreamContext:
    """torch.cuda.StreamContext(stream): makes `stream` current for a block,
    then restores the stream and device that were current. None: no-op."""

    def __init__(self, stream):
        self.stream = stream
        self._previous = None
        self._previous_device = None

    def __enter__(self):
        if self.stream is None:
            return self.stream
        client = self.stream._client
        self._previous_device = client.current_device()
        self._previous = _current_stream(client, self.stream.device_index)
        set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc):
        if self.stream is None:
            return False
        set_stream(self._previous)
        self.stream._client.set_device(self._previous_device)
        return False


def stream(stream):
    """torch.cuda.stream(stream): StreamContext(stream)."""
    return StreamContext(stream)
