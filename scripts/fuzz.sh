#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang, ASan and UBSan into
# ./build-fuzz (or $GPUMUX_FUZZ_BUILD_DIR) and runs each for N seconds
# (default 30) from its seeds and the corpus kept in the build folder.
# Prints name=value lines per target (execs, exec/s, crashes); exits non-zero
# when any target crashed, leaked or broke an invariant. Crash inputs and
# logs are left in BUILD/fuzz-out/<target>/; BUILD/tests/fuzz/<target>_fuzzer
# CRASH_FILE runs one again.
#   scripts/fuzz.sh [--seconds N] [TARGET...]   (TARGET: memory, or memory_fuzzer)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=30
targets=()
while (($#)); do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --seconds=*) seconds=${1#--seconds=}; shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("${1%_fuzzer}"); shift ;;
  esac
done
if ((${#targets[@]} == 0)); then
  targets=(session device memory observe stream event copy random nvtx memory_socket admin)
fi
build=$(realpath -m "${GPUMUX_FUZZ_BUILD_DIR:-build-fuzz}")

# -Wno-unknown-warning-option: clang does not know gcc's -Wshadow=local.
sanitize="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  "-DCMAKE_C_FLAGS=$sanitize" "-DCMAKE_CXX_FLAGS=$sanitize -Wno-unknown-warning-option" \
  -DGPUMUX_FUZZ=ON -DGPUMUX_WITH_CUDA=OFF -DGPUMUX_BUILD_TESTS=OFF -DGPUMUX_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j "${GPUMUX_JOBS:-$(nproc)}" --target "${targets[@]/%/_fuzzer}"

# ASan's defaults, ODR checking included (it reports nothing here), plus
# addr2line for stacks where llvm-symbolizer is not installed.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allow_addr2line=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:allow_addr2line=1}
failed=0
for target in "${targets[@]}"; do
  binary=$build/tests/fuzz/${target}_fuzzer
  out=$build/fuzz-out/$target
  corpus=$build/fuzz-corpus/$target
  seeds=$build/fuzz-seeds/$target
  rm -rf "$out" "$seeds"
  mkdir -p "$out" "$corpus"
  "$binary" -write_seeds="$seeds"
  status=0
  # -timeout: a call never takes more than the harness's 5 s deadline, so
  # 60 s on one input is a hang; `timeout` also catches one at exit, where
  # the daemon shuts down.
  (cd "$out" && timeout -k 10 $((seconds + 120)) "$binary" -max_total_time="$seconds" -timeout=60 \
    -print_final_stats=1 "$corpus" "$seeds") >"$out/log" 2>&1 || status=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$out/log")
  crashes=$(find "$out" -maxdepth 1 \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) \
    | wc -l)
  if ((status != 0 && crashes == 0)); then crashes=1; fi  # a failure libFuzzer saved no input for
  echo "${target}_fuzzer.execs=${execs:-0}"
  echo "${target}_fuzzer.exec_per_s=${rate:-0}"
  echo "${target}_fuzzer.corpus=$(find "$corpus" -type f | wc -l)"
  echo "${target}_fuzzer.crashes=$crashes"
  if ((crashes > 0)); then
    failed=1
    echo "fuzz.sh: ${target}_fuzzer failed (exit $status); log and inputs in $out:" >&2
    grep -E -A40 'gpumux fuzz:|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:' "$out/log" \
      | head -80 >&2
  fi
done
exit $failed
