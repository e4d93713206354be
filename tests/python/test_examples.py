"""The Python examples (examples/python) run as written against a real daemon."""

import os
import subprocess
import sys

import gpumux

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python")


def run_example(name, env, *args):
    done = subprocess.run([sys.executable, os.path.join(EXAMPLES, name), *args], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_share_tensor(daemon):
    out = run_example("share_tensor.py", daemon.env())
    assert out.splitlines() == ["consumer: 262144 floats, sum 262144.0",
                                "producer: sum after the consumer 524288.0"]


def test_sessions(daemon):
    holder = gpumux.connect(daemon.address, client_name="trainer", tenant="ml")
    held = holder.allocate(3 << 20, 1)
    out = run_example("sessions.py", daemon.env(), daemon.address)
    row = next(line for line in out.splitlines() if " trainer " in line)
    assert row.split()[4:7] == ["1", "3.0", "MiB"]
    assert "gpu 1 (gpumux host device 1): 3.0 MiB allocated" in out
    del held
