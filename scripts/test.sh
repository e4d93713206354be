#!/usr/bin/env bash
# Fresh Debian 12, as root: installs dependencies, checks the sources are
# formatted (scripts/format.sh --check), builds with gcc and warnings as
# errors (with CUDA where /usr/local/cuda has it) and runs every test that
# needs no GPU (ctest label `gpu` is left to scripts/gpu-check); then runs
# them again in the sanitizer build (scripts/sanitize.sh: clang, ASan and
# UBSan, no CUDA, warnings as errors), which fails on any sanitizer report,
# and runs every libFuzzer target from that build for 15 s
# (scripts/fuzz.sh). The sanitizer build compiles at the lowest priority
# while the first tests run, on the cores they leave idle while they wait
# on sockets and timers. Prints how long each phase took
# (phase.NAME_s=SECONDS).
set -euo pipefail
cd "$(dirname "$0")/.."
phase_start=$SECONDS
phase() {
  echo "phase.$1_s=$((SECONDS - phase_start))"
  phase_start=$SECONDS
}
sanitize_build=
trap '[[ -n $sanitize_build ]] && kill "$sanitize_build" 2>/dev/null; true' EXIT

bash scripts/install-deps.sh
phase install
bash scripts/format.sh --check
phase format
bash scripts/build.sh -DGPUMUX_WERROR=ON
phase build
sanitize_log=$(mktemp /tmp/gpumux-sanitize-build-XXXXXX.log)
nice -n 19 bash scripts/sanitize.sh --build-only > "$sanitize_log" 2>&1 &
sanitize_build=$!
(cd "${GPUMUX_BUILD_DIR:-build}" && ctest --output-on-failure -j "$(nproc)" -LE gpu --timeout 300)
phase tests
if ! wait "$sanitize_build"; then
  sanitize_build=
  tail -50 "$sanitize_log" >&2
  echo "test.sh: the sanitizer build failed" >&2
  exit 1
fi
sanitize_build=
phase sanitize_build_after_tests
bash scripts/sanitize.sh --no-build
phase sanitize_tests
bash scripts/fuzz.sh --seconds "${GPUMUX_FUZZ_SECONDS:-15}"
phase fuzz
