#!/usr/bin/python3
"""Allocate+drop from Python through gpumux vs torch.empty+del, side by side
in one run (rounds alternate), against a daemon this script starts (host
backend). Prints name=value lines.

usage: alloc_bench.py GPUMUXD [--cycles N] [--rounds R] [--size BYTES]
Needs PYTHONPATH with the gpumux package (build/python) and Debian's torch.
"""

import argparse
import os
import signal
import statistics
import subprocess
import tempfile
import time

import torch

import gpumux


def per_cycle_us(function, cycles):
    start = time.perf_counter_ns()
    function(cycles)
    return (time.perf_counter_ns() - start) / cycles / 1000


def gpumux_cycles(size):
    allocate = gpumux.allocate

    def run(cycles):
        for _ in range(cycles):
            allocate(size)
    return run


def torch_cycles(size):
    empty = torch.empty
    uint8 = torch.uint8

    def run(cycles):
        for _ in range(cycles):
            empty(size, dtype=uint8)
    return run


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("gpumuxd")
    parser.add_argument("--cycles", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--size", type=int, default=4096)
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="gpumux-py-bench-")
    socket = os.path.join(directory, "gpumux.sock")
    daemon = subprocess.Popen([args.gpumuxd, f"--socket={socket}", "--host-devices=1",
                               "--host-device-memory=1GiB"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        address = "unix://" + socket
        while not gpumux._C._is_available(address, 0.5):
            time.sleep(0.02)
        gpumux.set_default_client(gpumux.connect(address))
        ours, theirs = gpumux_cycles(args.size), torch_cycles(args.size)
        ours(1000)
        theirs(1000)
        gpumux_us, torch_us = [], []
        for _ in range(args.rounds):
            gpumux_us.append(per_cycle_us(ours, args.cycles))
            torch_us.append(per_cycle_us(theirs, args.cycles))
        g, t = statistics.median(gpumux_us), statistics.median(torch_us)
        print(f"python_gpumux_alloc_drop_us={g:.3f}")
        print(f"python_torch_empty_del_us={t:.3f}")
        print(f"python_alloc_drop_over_torch_empty={g / t:.3f}")
        # The quietest round of each: on a shared machine the medians carry
        # the other tenants' load.
        print(f"python_gpumux_alloc_drop_best_us={min(gpumux_us):.3f}")
        print(f"python_torch_empty_del_best_us={min(torch_us):.3f}")
        print(f"python_alloc_drop_over_torch_empty_best={min(gpumux_us) / min(torch_us):.3f}")
        print(f"python_alloc_size_bytes={args.size}")
        print(f"torch_version={torch.__version__}")
    finally:
        gpumux.set_default_client(None)
        daemon.send_signal(signal.SIGTERM)
        daemon.wait()


if __name__ == "__main__":
    main()
