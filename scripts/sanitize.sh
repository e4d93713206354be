#!/usr/bin/env bash
# Builds everything with AddressSanitizer (and LeakSanitizer) and UBSan into
# ./build-asan (or $GPUMUX_ASAN_BUILD_DIR), without CUDA, and runs every test
# that needs no GPU (ctest -LE gpu). Every process, the daemons and children
# tests start included, writes its sanitizer reports under
# BUILD/sanitizer-logs/; the script prints them and fails when a test failed
# or any report was written.
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath -m "${GPUMUX_ASAN_BUILD_DIR:-build-asan}")
# clang: its UBSan runs inside the ASan runtime, so UBSan's reports go to
# log_path too; gcc's separate libubsan writes them to stderr only (which a
# test may not show). Debian's gRPC, protobuf and Abseil are gcc-built
# shared libraries, which clang-built code links as they are.
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPUMUX_WITH_CUDA=OFF \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  "-DCMAKE_C_FLAGS=$flags" "-DCMAKE_CXX_FLAGS=$flags -Wno-unknown-warning-option" >/dev/null
cmake --build "$build" -j "${GPUMUX_JOBS:-$(nproc)}"

logs=$build/sanitizer-logs
rm -rf "$logs"
mkdir -p "$logs"
# Each report goes to a file named after its process (log_path.PID), so one
# from a daemon child or a killed helper is seen too, not only those that
# fail a test. ASan's defaults otherwise, ODR checking included (Debian's
# gRPC and protobuf are uninstrumented shared libraries and gpumux links
# its generated code once: it reports nothing); addr2line for stacks where
# llvm-symbolizer is not installed.
options=detect_leaks=1:allow_addr2line=1:log_path=$logs/report
export ASAN_OPTIONS=${ASAN_OPTIONS:-$options}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:$options}
status=0
# ChaosTest bounds the daemon's RSS growth over 50 killed clients (64 MiB),
# which ASan's quarantine of freed memory (256 MiB) alone exceeds: it runs
# after the others with the quarantine off, every other check still on.
chaos=ChaosTest.KilledClientsLeaveNothingBehind
(cd "$build" && ctest --output-on-failure -j "$(nproc)" -LE gpu -E "^$chaos\$" --timeout 300) || status=$?
(cd "$build" && ASAN_OPTIONS=$ASAN_OPTIONS:quarantine_size_mb=0:thread_local_quarantine_size_kb=0 \
  ctest --output-on-failure -LE gpu -R "^$chaos\$" --timeout 300) || status=$?
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
