#!/usr/bin/env bash
# The GPU benchmarks of a gpumux bundle (run by run-gpu-check from the bundle
# root, with GPUMUX_BIN and GPUMUX_TESTDATA set). Prints name=value lines.
set -euo pipefail
bin=${GPUMUX_BIN:-bin}
testdata=${GPUMUX_TESTDATA:-share/gpumux/testdata}
# Allocate+Free, copies, mapping cost and trace replay against the CUDA
# backend, each beside its CUDA baseline in the same process.
"$bin/gpumux_gpu_bench" --gpumuxd "$bin/gpumuxd" --testdata "$testdata"
# The RPC latency benchmark through a daemon that picked the CUDA backend.
"$bin/gpumux_rpc_bench" --gpumuxd "$bin/gpumuxd" --rounds 3 | sed 's/^/rpc_/'
