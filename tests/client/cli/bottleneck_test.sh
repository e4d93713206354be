#!/usr/bin/env bash
# `gpumux bottleneck` and `gpumux profile` against a real gpumuxd (host
# backend, a temporary socket) and real programs of a known shape
# (gpumux_bottleneck_target): the host view counts exactly the calls each
# program made, the device view and verdict fit its shape, a crashing
# program's exit and what it did are reported, the trace parses with nesting
# spans and flows from calls to device work, and a live session is profiled
# for a 2 s window only. Reports are checked by check_bottleneck.py.
#   bottleneck_test.sh BUILD_DIR
set -euo pipefail

build_dir=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
gpumuxd=$build_dir/server/gpumuxd
gpumux=$build_dir/client/cli/gpumux
target=$build_dir/tests/client/gpumux_bottleneck_target
check="/usr/bin/python3 $here/check_bottleneck.py"
fail() { echo "bottleneck_test: FAIL: $*" >&2; exit 1; }
for binary in "$gpumuxd" "$gpumux" "$target"; do
  [[ -x $binary ]] || fail "$binary is not built"
done

work=$(mktemp -d)
sock=$work/gpumux.sock
daemon_pid=
serve_pid=
cleanup() {
  for pid in $serve_pid $daemon_pid; do kill "$pid" 2> /dev/null || true; done
  wait 2> /dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

"$gpumuxd" --socket="$sock" --backend=host --host-devices=1 --host-device-memory=1GiB \
  < /dev/null 2> "$work/daemon.log" &
daemon_pid=$!
for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.1; done
[[ -S $sock ]] || { cat "$work/daemon.log" >&2; fail "gpumuxd did not start"; }
export GPUMUX_ADDRESS=unix://$sock

for mode in alloc wait crash; do
  "$gpumux" bottleneck --json --trace "$work/$mode.trace" -- "$target" "$mode" \
    > "$work/$mode.json" 2> "$work/$mode.err" || { cat "$work/$mode.err" >&2; fail "$mode: exit $?"; }
  $check report "$work/$mode.json" "$mode" || fail "$mode report"
  $check trace "$work/$mode.trace" || fail "$mode trace"
  echo "bottleneck_test: $mode ok"
done

# A Python program through the gpumux package (when it is built): its
# stdout goes to stderr under --json, whose stdout is the report alone.
if [[ -f $build_dir/python/gpumux/__init__.py ]]; then
  # A sanitizer build's package needs the sanitizer's runtime in Python,
  # whose own objects alive at exit are no leaks of ours.
  python_env=()
  if [[ -n ${GPUMUX_TEST_PYTHON_PRELOAD:-} ]]; then
    python_env=("LD_PRELOAD=$GPUMUX_TEST_PYTHON_PRELOAD" "ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0")
  fi
  env PYTHONPATH="$build_dir/python" "${python_env[@]}" \
    "$gpumux" bottleneck --json --trace "$work/python.trace" -- \
    /usr/bin/python3 "$here/bottleneck_program.py" > "$work/python.json" 2> "$work/python.err" ||
    { cat "$work/python.err" >&2; fail "python: exit $?"; }
  grep -q "^python program done$" "$work/python.err" || fail "python: its output is not on stderr"
  $check report "$work/python.json" python || fail "python report"
  $check trace "$work/python.trace" || fail "python trace"
  echo "bottleneck_test: python ok"
fi

# The text report: bottleneck's frames and sections, the top host row.
"$gpumux" bottleneck --top 3 -- "$target" wait > "$work/wait.txt"
for section in "Environment Summary" "Host view (libgpumux calls)" "Device view (work the daemon ran)" \
  "NVTX ranges" "Verdict" "Caveats"; do
  grep -q "^  $section\$" "$work/wait.txt" || fail "no section '$section'"
done
grep -q "^   ncalls  tottime  percall  cumtime  percall function$" "$work/wait.txt" ||
  fail "no pstats header"
grep -q "List reduced from [0-9]* to 3 due to restriction <3>" "$work/wait.txt" || fail "--top 3"
grep -A1 "^   ncalls" "$work/wait.txt" | grep -q " 20 .* Stream::Synchronize$" ||
  fail "the top host row is not Stream::Synchronize"
grep -q "^Device-bound: " "$work/wait.txt" || fail "wait is not device-bound"

# Bad command lines and a program that cannot start.
set +e
"$gpumux" bottleneck > /dev/null 2> "$work/usage.err"; [[ $? == 2 ]] || fail "no program: exit 2"
grep -q "bottleneck wants a program" "$work/usage.err" || fail "no program: message"
"$gpumux" bottleneck --json -- "$work/no-such-program" > "$work/missing.json" 2> /dev/null
[[ $? == 0 ]] || fail "a missing program is reported, exit 0"
"$gpumux" profile --session 999999 --duration 1 > /dev/null 2> "$work/nf.err"
[[ $? == 1 ]] || fail "profile of no session: exit 1"
"$gpumux" profile --session 1 --duration 0 > /dev/null 2>&1; [[ $? == 2 ]] || fail "duration 0: exit 2"
set -e
grep -q '"exit": "exited with status 127"' "$work/missing.json" || fail "missing program's exit"
grep -q "NOT_FOUND: no session 999999 is open" "$work/nf.err" || { cat "$work/nf.err" >&2; fail "NOT_FOUND"; }

# Attach: a live session for 2 s.
"$target" serve > "$work/serve.out" 2> "$work/serve.err" &
serve_pid=$!
for _ in $(seq 100); do grep -q '^session ' "$work/serve.out" && break; sleep 0.1; done
session=$(sed -n 's/^session //p' "$work/serve.out")
[[ -n $session ]] || { cat "$work/serve.err" >&2; fail "the served program did not start"; }
"$gpumux" profile --session "$session" --duration 2 --json --trace "$work/window.trace" \
  > "$work/window.json" || fail "profile exit $?"
$check report "$work/window.json" window || fail "window report"
$check trace "$work/window.trace" || fail "window trace"
echo "bottleneck_test: window ok"
