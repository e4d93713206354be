#!/usr/bin/env bash
# Fresh Debian 12, as root: installs dependencies, checks the sources are
# formatted (scripts/format.sh --check), builds, and runs every test that
# needs no GPU (ctest label `gpu` is left to scripts/gpu-check), then every
# libFuzzer target for 15 s (scripts/fuzz.sh: clang, ASan and UBSan, in
# ./build-fuzz). The fuzz targets build at the lowest priority while the
# tests run, on the cores the tests leave idle while they wait on sockets
# and timers. Prints how long each phase took (phase.NAME_s=SECONDS).
set -euo pipefail
cd "$(dirname "$0")/.."
phase_start=$SECONDS
phase() {
  echo "phase.$1_s=$((SECONDS - phase_start))"
  phase_start=$SECONDS
}
fuzz_build=
trap '[[ -n $fuzz_build ]] && kill "$fuzz_build" 2>/dev/null; true' EXIT

bash scripts/install-deps.sh
phase install
bash scripts/format.sh --check
phase format
bash scripts/build.sh -DGPUMUX_WERROR=ON
phase build
fuzz_log=$(mktemp /tmp/gpumux-fuzz-build-XXXXXX.log)
nice -n 19 bash scripts/fuzz.sh --build-only > "$fuzz_log" 2>&1 &
fuzz_build=$!
(cd "${GPUMUX_BUILD_DIR:-build}" && ctest --output-on-failure -j "$(nproc)" -LE gpu --timeout 300)
phase tests
if ! wait "$fuzz_build"; then
  fuzz_build=
  tail -50 "$fuzz_log" >&2
  echo "test.sh: the fuzz targets do not build" >&2
  exit 1
fi
fuzz_build=
phase fuzz_build_after_tests
bash scripts/fuzz.sh --seconds "${GPUMUX_FUZZ_SECONDS:-15}"
phase fuzz
