#!/usr/bin/env bash
# The sanitizer build and its test run. Builds gpumux with clang,
# AddressSanitizer (with LeakSanitizer) and UndefinedBehaviorSanitizer,
# without CUDA and with warnings as errors (the configuration of the
# container image's build, with the other compiler), tests and libFuzzer
# targets included, into ./build-sanitize (or $GPUMUX_SANITIZE_BUILD_DIR;
# scripts/fuzz.sh runs its targets from there). Then runs every test that
# needs no GPU (ctest -LE gpu). Every process, the daemons and the children
# tests start included, writes its sanitizer reports under
# BUILD/sanitizer-logs/; the script prints them and fails when a test failed
# or any report was written. The tests labelled install are left out: they
# build programs against the installed tree with the system's compiler,
# which sanitized libraries cannot serve.
#   scripts/sanitize.sh [--build-only | --no-build] [-- CTEST_ARGS...]
# --build-only: configure and build, run nothing. --no-build: run the tests
# of the last build. CTEST_ARGS go to ctest (e.g. -R ClientQueries).
set -euo pipefail
cd "$(dirname "$0")/.."
build_only=0
no_build=0
ctest_args=()
while (($#)); do
  case "$1" in
    --build-only) build_only=1; shift ;;
    --no-build) no_build=1; shift ;;
    --) shift; ctest_args=("$@"); break ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "sanitize.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
source scripts/sanitize-config.sh
if ((no_build == 0)); then
  configure_sanitize_build
  cmake --build "$sanitize_build" -j "${GPUMUX_JOBS:-$(nproc)}"
fi
if ((build_only)); then exit 0; fi

logs=$sanitize_build/sanitizer-logs
rm -rf "$logs"
mkdir -p "$logs"
# Each report goes to a file named after its process (log_path.PID), so one
# from a daemon child or a killed helper is seen too, not only those that
# fail a test. ASan's defaults otherwise, ODR checking included (Debian's
# gRPC and protobuf are uninstrumented shared libraries and gpumux links its
# generated code once: it reports nothing); addr2line for stacks where
# llvm-symbolizer is not installed.
# UBSan reads the sanitizers' common flags too, after ASan's: its options
# leave detect_leaks alone, so that a test's own ASAN_OPTIONS (Python's,
# tests/CMakeLists.txt) decides it.
common=allow_addr2line=1:log_path=$logs/report
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:$common}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:$common}
status=0
# ChaosTest bounds the daemon's RSS growth over 50 killed clients (64 MiB),
# which ASan's quarantine of freed memory (256 MiB) alone exceeds: it runs
# after the others with the quarantine off, every other check still on.
chaos=ChaosTest.KilledClientsLeaveNothingBehind
(cd "$sanitize_build" && ctest --output-on-failure -j "$(nproc)" -LE "gpu|install" -E "^$chaos\$" --timeout 300 \
  "${ctest_args[@]}") || status=$?
if ((${#ctest_args[@]} == 0)); then
  (cd "$sanitize_build" && ASAN_OPTIONS=$ASAN_OPTIONS:quarantine_size_mb=0:thread_local_quarantine_size_kb=0 \
    ctest --output-on-failure -LE gpu -R "^$chaos\$" --timeout 300) || status=$?
fi
reports=$(find "$logs" -type f | sort)
if [[ -n $reports ]]; then
  echo "sanitize.sh: $(wc -l <<<"$reports") sanitizer report(s):" >&2
  for report in $reports; do
    echo "===== $report" >&2
    cat "$report" >&2
  done
  status=1
fi
if ((status == 0)); then echo "sanitize.sh: all tests passed, no sanitizer reports"; fi
exit $status
