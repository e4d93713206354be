#!/usr/bin/env bash
# Fresh Debian 12, as root: installs dependencies, checks the sources are
# formatted (scripts/format.sh --check), builds, and runs every test that
# needs no GPU (ctest label `gpu` is left to scripts/gpu-check), then every
# libFuzzer target for 15 s (scripts/fuzz.sh: clang, ASan and UBSan, in
# ./build-fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/format.sh --check
bash scripts/build.sh -DGPUMUX_WERROR=ON
cd "${GPUMUX_BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)" -LE gpu --timeout 300
cd - >/dev/null
bash scripts/fuzz.sh --seconds "${GPUMUX_FUZZ_SECONDS:-15}"
