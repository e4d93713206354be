"""gpumux's device and state functions (torch.cuda's) against a real daemon."""

import pytest

import gpumux
from conftest import Daemon


def test_lazy_init_connects_on_first_use(daemon):
    assert not gpumux.is_initialized()
    assert gpumux.device_count() == 2
    gpumux.init()
    assert gpumux.is_initialized()
    assert gpumux.default_client().address == daemon.address


def test_is_available_without_a_session(daemon, monkeypatch):
    assert gpumux.is_available()
    monkeypatch.setenv("GPUMUX_ADDRESS", "unix:///nonexistent/gpumux.sock")
    gpumux.set_default_client(None)
    assert not gpumux.is_available()
    assert gpumux.device_count() == 0
    with pytest.raises(gpumux.UnavailableError) as error:
        gpumux.init()
    assert isinstance(error.value, ConnectionError)
    assert error.value.code == "UNAVAILABLE"
    assert "cannot reach gpumuxd at unix:///nonexistent/gpumux.sock" in str(error.value)


def test_connect_gives_separate_sessions(daemon):
    a = gpumux.connect(daemon.address, client_name="alpha", tenant="team-a", labels={"pod": "p0"})
    b = gpumux.connect(daemon.address)
    assert a.session_id != b.session_id
    assert a.tenant == "team-a"
    sessions = {s["session_id"]: s for s in gpumux.observe(daemon.address).list_sessions()}
    assert sessions[a.session_id]["client_name"] == "alpha"
    assert sessions[a.session_id]["labels"] == {"pod": "p0"}
    with pytest.raises(ValueError, match='allocation must be "local" or "daemon"'):
        gpumux.connect(daemon.address, allocation="remote")
    with pytest.raises(gpumux.InvalidArgumentError, match="label"):
        gpumux.connect(daemon.address, labels={"": "x"})


def test_device_queries(daemon):
    assert gpumux.get_device_name() == "gpumux host device 0"
    assert gpumux.get_device_name(1) == "gpumux host device 1"
    assert gpumux.get_device_name("cuda:1") == "gpumux host device 1"
    assert gpumux.get_device_capability() == (0, 0)
    properties = gpumux.get_device_properties(0)
    assert properties.total_memory == 1 << 30
    assert properties.backend == "host"
    assert properties.name == "gpumux host device 0"
    assert repr(properties).startswith("_CudaDeviceProperties(name='gpumux host device 0', major=0, minor=0, total_memory=1024MB")
    assert gpumux.get_arch_list() == []
    assert gpumux.get_gencode_flags() == ""
    free, total = gpumux.mem_get_info(0)
    assert total == 1 << 30 and 0 < free <= total
    gpumux.synchronize()
    gpumux.synchronize(1)


def test_bad_devices(daemon):
    with pytest.raises(gpumux.InvalidArgumentError) as error:
        gpumux.get_device_name(5)
    assert isinstance(error.value, ValueError) and error.value.code == "INVALID_ARGUMENT"
    with pytest.raises(ValueError, match="Expected a cuda device, but got: cpu"):
        gpumux.get_device_name("cpu")
    with pytest.raises(ValueError, match="Invalid device string"):
        gpumux.get_device_name("cuda:x")
    with pytest.raises(TypeError):
        gpumux.get_device_name(1.5)
    with pytest.raises(gpumux.InvalidArgumentError):
        gpumux.set_device(2)


def test_current_device_is_per_thread_and_the_context_restores_it(daemon):
    import threading

    assert gpumux.current_device() == 0
    with gpumux.device(1):
        assert gpumux.current_device() == 1
        seen = []
        thread = threading.Thread(target=lambda: seen.append(gpumux.current_device()))
        thread.start()
        thread.join()
        assert seen == [0]
    assert gpumux.current_device() == 0
    gpumux.set_device(1)
    assert gpumux.current_device() == 1
    gpumux.set_device(-1)  # ignored, as torch does
    assert gpumux.current_device() == 1
    with gpumux.device(None):
        assert gpumux.current_device() == 1
    with gpumux.device(-1):  # changes nothing, as torch.cuda.device(-1)
        assert gpumux.current_device() == 1
        with gpumux.device(0):
            assert gpumux.current_device() == 0
        assert gpumux.current_device() == 1
    assert gpumux.current_device() == 1
    gpumux.set_device(0)


def test_device_of_a_buffer(daemon):
    buffer = gpumux.allocate(4096, device=1)
    with gpumux.device_of(buffer):
        assert gpumux.current_device() == 1
    assert gpumux.current_device() == 0


def test_torch_devices_are_accepted(daemon):
    torch = pytest.importorskip("torch")
    assert gpumux.get_device_name(torch.device("cuda", 1)) == "gpumux host device 1"
    with pytest.raises(ValueError, match="Expected a cuda device"):
        gpumux.get_device_name(torch.device("cpu"))


def test_current_blas_handle_needs_cuda(daemon):
    with pytest.raises(gpumux.FailedPreconditionError, match="needs a CUDA daemon"):
        gpumux.current_blas_handle()


def test_a_daemon_that_goes_away_fails_calls_with_connection_error():
    d = Daemon()
    client = gpumux.connect(d.address)
    assert client.device_count() == 2
    d.stop()
    with pytest.raises(ConnectionError):
        client.device_count()
    assert client.session_ended


def test_a_forked_child_cannot_use_the_parents_connection(daemon):
    import os

    gpumux.init()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            gpumux.device_count()
            os.write(write, b"no error")
        except RuntimeError as error:
            os.write(write, str(error).encode())
        os._exit(0)
    os.close(write)
    message = os.read(read, 1000).decode()
    os.waitpid(pid, 0)
    assert message.startswith("Cannot re-initialize gpumux in forked subprocess")
    assert gpumux.device_count() == 2  # the parent's is untouched


def test_bad_timeouts(daemon):
    for timeout in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="timeout must be a positive number of seconds"):
            gpumux.connect(daemon.address, timeout=timeout)


# Every module function that takes a device, with a device the daemon does not have.
DEVICE_FUNCTIONS = [
    ("get_device_name", lambda d: gpumux.get_device_name(d)),
    ("get_device_capability", lambda d: gpumux.get_device_capability(d)),
    ("get_device_properties", lambda d: gpumux.get_device_properties(d)),
    ("synchronize", lambda d: gpumux.synchronize(d)),
    ("set_device", lambda d: gpumux.set_device(d)),
    ("allocate", lambda d: gpumux.allocate(4096, device=d)),
    ("memory_stats", lambda d: gpumux.memory_stats(d)),
    ("memory_summary", lambda d: gpumux.memory_summary(d)),
    ("memory_allocated", lambda d: gpumux.memory_allocated(d)),
    ("reset_peak_memory_stats", lambda d: gpumux.reset_peak_memory_stats(d)),
    ("reset_accumulated_memory_stats", lambda d: gpumux.reset_accumulated_memory_stats(d)),
    ("empty_cache", lambda d: gpumux.empty_cache(d)),
    ("set_per_process_memory_fraction", lambda d: gpumux.set_per_process_memory_fraction(0.5, d)),
    ("set_memory_limit", lambda d: gpumux.set_memory_limit(1 << 20, d)),
    ("mem_get_info", lambda d: gpumux.mem_get_info(d)),
    ("get_rng_state", lambda d: gpumux.get_rng_state(d)),
    ("set_rng_state", lambda d: gpumux.set_rng_state(bytes(16), d)),
    ("Stream", lambda d: gpumux.Stream(d)),
    ("Stream.priority_range", lambda d: gpumux.Stream.priority_range(d)),
    ("Event.from_ipc_handle", lambda d: gpumux.Event.from_ipc_handle(d, bytes(64))),
]


@pytest.mark.parametrize("name,call", DEVICE_FUNCTIONS, ids=[n for n, _ in DEVICE_FUNCTIONS])
def test_a_device_out_of_range_is_invalid_argument(daemon, name, call):
    with pytest.raises(gpumux.InvalidArgumentError) as error:
        call(7)
    assert error.value.code == "INVALID_ARGUMENT"
    assert str(error.value), name
    with pytest.raises(ValueError, match="Expected a non-negative device index|Expected a cuda device"):
        # A negative index is torch's "no device": set_device and Stream take it.
        call("cpu" if name in ("set_device", "Stream") else -3)
