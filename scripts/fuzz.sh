#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) in the sanitizer build (clang,
# ASan and UBSan: scripts/sanitize.sh's ./build-sanitize, or
# $GPUMUX_SANITIZE_BUILD_DIR) and runs each for N seconds
# (default 30) from its seeds and the corpus kept in the build folder.
# Prints name=value lines per target (execs, exec/s, crashes); exits non-zero
# when any target crashed, leaked or broke an invariant. Crash inputs and
# logs are left in BUILD/fuzz-out/<target>/; BUILD/tests/fuzz/<target>_fuzzer
# CRASH_FILE runs one again.
#   scripts/fuzz.sh [--seconds N] [--jobs N] [--build-only] [TARGET...]
# TARGET: memory, or memory_fuzzer. --jobs: targets run at once (default:
# the number of cores; each target is one process). --build-only builds and
# runs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=30
jobs=$(nproc)
build_only=0
targets=()
while (($#)); do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --seconds=*) seconds=${1#--seconds=}; shift ;;
    --jobs) jobs=$2; shift 2 ;;
    --jobs=*) jobs=${1#--jobs=}; shift ;;
    --build-only) build_only=1; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("${1%_fuzzer}"); shift ;;
  esac
done
if ((${#targets[@]} == 0)); then
  targets=(session device memory memory_compact observe stream event copy comm group random nvtx profile memory_socket admin)
fi
# The sanitizer build (scripts/sanitize-config.sh), which holds the tests too.
source scripts/sanitize-config.sh
build=$sanitize_build
configure_sanitize_build
cmake --build "$build" -j "${GPUMUX_JOBS:-$(nproc)}" --target "${targets[@]/%/_fuzzer}"
if ((build_only)); then exit 0; fi

# ASan's defaults, ODR checking included (it reports nothing here), plus
# addr2line for stacks where llvm-symbolizer is not installed.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allow_addr2line=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:allow_addr2line=1}
# One target: its run, then its figures in BUILD/fuzz-out/<target>/result
# (and its failure report on stderr).
fuzz_one() {
  local target=$1
  local binary=$build/tests/fuzz/${target}_fuzzer
  local out=$build/fuzz-out/$target
  local corpus=$build/fuzz-corpus/$target
  local seeds=$build/fuzz-seeds/$target
  rm -rf "$out" "$seeds"
  mkdir -p "$out" "$corpus"
  "$binary" -write_seeds="$seeds"
  local status=0
  # -timeout: a call never takes more than the harness's 5 s deadline, so
  # 60 s on one input is a hang; `timeout` also catches one at exit, where
  # the daemon shuts down.
  (cd "$out" && timeout -k 10 $((seconds + 120)) "$binary" -max_total_time="$seconds" -timeout=60 \
    -print_final_stats=1 "$corpus" "$seeds") >"$out/log" 2>&1 || status=$?
  local execs rate crashes
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$out/log")
  crashes=$(find "$out" -maxdepth 1 \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) \
    | wc -l)
  if ((status != 0 && crashes == 0)); then crashes=1; fi  # a failure libFuzzer saved no input for
  {
    echo "${target}_fuzzer.execs=${execs:-0}"
    echo "${target}_fuzzer.exec_per_s=${rate:-0}"
    echo "${target}_fuzzer.corpus=$(find "$corpus" -type f | wc -l)"
    echo "${target}_fuzzer.crashes=$crashes"
  } > "$out/result"
  if ((crashes > 0)); then
    {
      echo "fuzz.sh: ${target}_fuzzer failed (exit $status); log and inputs in $out:"
      grep -E -A40 'gpumux fuzz:|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:' "$out/log" \
        | head -80
    } >&2
    return 1
  fi
}

# --jobs targets at a time; the figures print in the targets' order.
failed=0
running=0
for target in "${targets[@]}"; do
  if ((running >= jobs)); then
    wait -n || failed=1
    running=$((running - 1))
  fi
  fuzz_one "$target" &
  running=$((running + 1))
done
while ((running > 0)); do
  wait -n || failed=1
  running=$((running - 1))
done
for target in "${targets[@]}"; do
  cat "$build/fuzz-out/$target/result" 2>/dev/null || { echo "${target}_fuzzer.crashes=1"; failed=1; }
done
exit $failed
