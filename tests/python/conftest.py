"""Fixtures for the gpumux package's tests: a real gpumuxd (host backend, two
1 GiB devices) on a socket of its own, per test module, and the package's
default connection pointed at it and dropped after each test.

Environment (set by ctest, tests/python/CMakeLists.txt): PYTHONPATH holds
build/python, GPUMUXD is the daemon binary.
"""

import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

import gpumux

GPUMUXD = os.environ.get("GPUMUXD", "build/server/gpumuxd")
# util-linux's setpriv sets the daemon's parent-death signal and execs it,
# so that a test process that dies (a crash, a ctest timeout) takes its
# daemons along. (A preexec_fn would run Python between fork and exec, which
# is unsafe once gRPC's threads run in the test process.)
DIE_WITH_THE_TEST = ["setpriv", "--pdeathsig", "TERM", "--"]


class Daemon:
    def __init__(self, extra_args=()):
        self.dir = tempfile.mkdtemp(prefix="gpumux-py-")
        self.socket = os.path.join(self.dir, "gpumux.sock")
        self.address = "unix://" + self.socket
        self.log = open(os.path.join(self.dir, "gpumuxd.log"), "wb")
        self.process = subprocess.Popen(
            [*DIE_WITH_THE_TEST, GPUMUXD, f"--socket={self.socket}", "--host-devices=2",
             "--host-device-memory=1GiB", "--client-reply-timeout=500ms", *extra_args],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while not gpumux._C._is_available(self.address, 0.5):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"gpumuxd did not serve: {open(self.log.name).read()}")
            time.sleep(0.02)

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=20)
        self.log.close()
        assert code == 0, open(self.log.name).read()

    def env(self, **extra):
        env = dict(os.environ, GPUMUX_ADDRESS=self.address)
        env.update(extra)
        return env


@pytest.fixture(scope="module")
def daemon():
    d = Daemon()
    yield d
    gpumux.set_default_client(None)
    d.stop()


@pytest.fixture(autouse=True)
def default_connection(request, monkeypatch):
    """Points the module functions at the module's daemon, with a fresh
    default connection for each test."""
    if "daemon" in request.fixturenames:
        d = request.getfixturevalue("daemon")
        monkeypatch.setenv("GPUMUX_ADDRESS", d.address)
    gpumux.set_default_client(None)
    yield
    gpumux.set_default_client(None)


def run_python(code, env, timeout=60):
    """Runs `code` in a new /usr/bin/python3 process; returns its stdout."""
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"child failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done.stdout


def observer_stats(address, device=0):
    return gpumux.observe(address).memory_stats(device)


def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.005)
