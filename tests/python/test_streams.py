"""gpumux.Stream and gpumux.Event (torch.cuda's) against a real daemon."""

import gc

import pytest

import gpumux
from conftest import run_python


def session_counts(daemon):
    mine = gpumux.default_client().session_id
    session = next(s for s in gpumux.observe(daemon.address).list_sessions() if s["session_id"] == mine)
    return session["streams"], session["events"]


def test_stream_methods(daemon):
    stream = gpumux.Stream(priority=-1)
    assert stream.device == 0
    least, greatest = gpumux.Stream.priority_range()
    assert greatest <= stream.priority <= least
    assert stream.query()
    stream.synchronize()
    other = gpumux.Stream(device=1)
    assert other.device == 1
    with gpumux.device(1):
        assert gpumux.Stream(device=-1).device == 1  # torch.cuda.Stream(-1): the current device
    event = stream.record_event()
    assert isinstance(event, gpumux.Event)
    event.synchronize()
    assert event.query()
    stream.wait_event(event)
    stream.wait_stream(gpumux.Stream())
    assert stream == stream and stream != other
    assert len({stream, stream, other}) == 2
    assert repr(stream).startswith("<gpumux.Stream device=0 stream_id=")


def test_streams_and_events_are_destroyed_when_dropped(daemon):
    gpumux.init()
    assert session_counts(daemon) == (0, 0)
    streams = [gpumux.Stream() for _ in range(3)]
    events = [s.record_event() for s in streams]
    assert session_counts(daemon) == (3, 3)
    del streams, events
    gc.collect()
    assert session_counts(daemon) == (0, 0)


def test_current_and_default_streams(daemon):
    assert gpumux.current_stream().stream_id == 0
    assert gpumux.default_stream(1).stream_id == 0
    stream = gpumux.Stream(device=1)
    with gpumux.stream(stream):
        assert gpumux.current_device() == 1
        assert gpumux.current_stream() is stream
        buffer = gpumux.allocate(4096)  # on the current stream of device 1
        assert buffer.device == 1
    assert gpumux.current_device() == 0
    assert gpumux.current_stream(1).stream_id == 0
    gpumux.set_stream(stream)
    assert gpumux.current_stream(1) is stream
    stream_id = stream.stream_id
    del stream
    gc.collect()
    # set_stream keeps the current stream alive while it is current.
    assert gpumux.current_stream(1).stream_id == stream_id
    assert gpumux.current_stream(1).query()
    gpumux.set_stream(gpumux.default_stream(1))
    gpumux.set_device(0)
    with gpumux.stream(None):
        pass


def test_a_wrapped_stream_that_does_not_exist(daemon):
    ghost = gpumux.Stream(stream_id=424242, device_index=0)
    with pytest.raises(gpumux.NotFoundError):
        ghost.query()


def test_event_timing(daemon):
    start = gpumux.Event(enable_timing=True)
    end = gpumux.Event(enable_timing=True)
    with pytest.raises(gpumux.FailedPreconditionError,
                       match="Both events must be recorded before calculating elapsed time"):
        start.elapsed_time(end)
    start.record()
    buffer = gpumux.allocate(1 << 20)
    buffer.memset(1)
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) >= 0.0
    untimed = gpumux.Event()
    untimed.record()
    untimed.synchronize()
    with pytest.raises(gpumux.GpumuxError):
        start.elapsed_time(untimed)


def test_interprocess_event(daemon):
    event = gpumux.Event(interprocess=True)
    with pytest.raises(gpumux.InvalidArgumentError):
        gpumux.Event(enable_timing=True, interprocess=True).record()
    stream = gpumux.Stream()
    event.record(stream)
    handle = event.ipc_handle()
    assert isinstance(handle, bytes) and len(handle) == 64
    out = run_python(
        "import gpumux\n"
        f"e = gpumux.Event.from_ipc_handle(0, {handle!r})\n"
        "e.synchronize(); print(e.query(), e.interprocess)\n"
        "e.wait()\n",
        daemon.env())
    assert out.split() == ["True", "True"]
    with pytest.raises(gpumux.InvalidArgumentError,
                       match="cudaIpcEventHandle_t expects byte-like object of size 64, but got 3"):
        gpumux.Event.from_ipc_handle(0, b"abc")
    with pytest.raises(gpumux.FailedPreconditionError):
        gpumux.Event().ipc_handle()


def test_event_on_another_device_stream_is_refused(daemon):
    event = gpumux.Event()
    event.record(gpumux.Stream(device=0))
    with pytest.raises(gpumux.InvalidArgumentError):
        event.record(gpumux.Stream(device=1))


def test_stream_limits_raise_resource_exhausted(daemon):
    other = gpumux.connect(daemon.address)
    streams = []
    with pytest.raises(gpumux.ResourceExhaustedError) as error:
        for _ in range(100000):
            streams.append(gpumux.Stream(client=other))
    assert not isinstance(error.value, gpumux.OutOfMemoryError)
    assert error.value.code == "RESOURCE_EXHAUSTED"


def test_the_stream_context_of_another_connection(daemon):
    other = gpumux.connect(daemon.address)
    stream = gpumux.Stream(device=1, client=other)
    with gpumux.stream(stream):
        assert other.current_device() == 1
        assert other.current_stream_id(1)[0] == stream.stream_id
        assert gpumux.current_device() == 0  # the default connection's is its own
    assert other.current_device() == 0
    assert other.current_stream_id(1)[0] == 0
