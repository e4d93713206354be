#!/usr/bin/env bash
# Configures and builds gpumux into ./build (or $GPUMUX_BUILD_DIR).
#   scripts/build.sh [--target NAME]... [CMAKE CONFIGURE ARGUMENTS]
# Each --target builds only that target (and what it needs) instead of
# everything; the other arguments go to CMake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${GPUMUX_BUILD_DIR:-build}
targets=()
while [[ ${1:-} == --target ]]; do
  [[ -n ${2:-} ]] || { echo "build.sh: --target needs a target name" >&2; exit 2; }
  targets+=("$2")
  shift 2
done
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-RelWithDebInfo} "$@"
cmake --build "$build" -j "$(nproc)" ${targets[@]+--target "${targets[@]}"}
