#!/usr/bin/env bash
# Fresh Debian 12, as root: installs dependencies, builds the daemon and the
# CLI (only them: the tests and benchmarks are scripts/test.sh's), and runs
# gpumuxd in the foreground on /run/gpumux/gpumux.sock (CUDA backend where a
# GPU is visible and the build has it, host backend otherwise). Extra
# arguments go to gpumuxd, e.g. --listen=0.0.0.0:7070.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh --target gpumuxd --target gpumux
exec "${GPUMUX_BUILD_DIR:-build}/server/gpumuxd" "$@"
