#!/usr/bin/env bash
# `gpumux health` and `gpumux top` against a real gpumuxd (host backend, a
# temporary socket and a TCP observe address) with two real client
# processes holding memory. `top` runs interactively inside a private tmux
# server (tmux new-session -d -x 200 -y 50): the test reads the screen with
# capture-pane, sends the sort and quit keys, resizes the window, stops and
# restarts the daemon under it, and interrupts it with C-c.
#   cli_live_test.sh BUILD_DIR
# Without tmux the test fails: it skips nothing.
set -euo pipefail

build_dir=$(cd "$1" && pwd)
gpumuxd=$build_dir/server/gpumuxd
gpumux=$build_dir/client/cli/gpumux
child=$build_dir/tests/cross_process/gpumux_test_child
fail() { echo "cli_live_test: FAIL: $*" >&2; exit 1; }
command -v tmux > /dev/null || fail "tmux is not installed (scripts/install-deps.sh installs it)"
for binary in "$gpumuxd" "$gpumux" "$child"; do
  [[ -x $binary ]] || fail "$binary is not built"
done

work=$(mktemp -d)
sock=$work/gpumux.sock
tmux_socket=$work/tmux.sock
unset TMUX
pids=()
daemon_pid=
cleanup() {
  tmux -S "$tmux_socket" kill-server 2> /dev/null || true
  for pid in "${pids[@]}" $daemon_pid; do kill "$pid" 2> /dev/null || true; done
  wait 2> /dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

daemon_starts=0
start_daemon() {  # on $sock, with a TCP observe listener on a free port; sets $tcp
  # Each start logs to a file of its own: the shell forks before the child
  # truncates a reused log, so a loop reading it could see the last run's port.
  daemon_starts=$((daemon_starts + 1))
  local log=$work/daemon-$daemon_starts.log
  "$gpumuxd" --socket="$sock" --backend=host --host-devices=2 --host-device-memory=256MiB \
    --listen=127.0.0.1:0 < /dev/null 2> "$log" &
  daemon_pid=$!
  for _ in $(seq 100); do
    grep -q 'observe-only on TCP' "$log" 2> /dev/null && break
    kill -0 "$daemon_pid" 2> /dev/null || { cat "$log" >&2; fail "gpumuxd exited"; }
    sleep 0.1
  done
  local port
  port=$(sed -n 's/.*observe-only on TCP 127\.0\.0\.1:\([0-9][0-9]*\).*/\1/p' "$log" | head -1)
  [[ -n $port ]] || { cat "$log" >&2; fail "gpumuxd did not say its TCP port"; }
  tcp=127.0.0.1:$port
}
stop_daemon() {
  kill -TERM "$daemon_pid"
  wait "$daemon_pid" || fail "gpumuxd exited $? on SIGTERM"
  daemon_pid=
}
# start_client NAME TENANT POD BYTES: a session holding BYTES on device 0.
start_client() {
  "$child" session "unix://$sock" "$1" "$2" "$3" "$4" < /dev/null > "$work/$1.out" 2> "$work/$1.err" &
  pids+=($!)
  for _ in $(seq 100); do
    grep -q '^ready ' "$work/$1.out" 2> /dev/null && return 0
    sleep 0.1
  done
  cat "$work/$1.err" >&2
  fail "client $1 did not get ready"
}

start_daemon
# The evaluator opens first (the lower session id) and holds less, so the
# sort by allocated bytes and the sort by session id differ.
start_client evaluator - - $((8 << 20))
start_client trainer pod-a ml/trainer-0 $((48 << 20))

# --- health ---------------------------------------------------------------
rc=0
"$gpumux" --address "$sock" health > "$work/health" 2>&1 || rc=$?
[[ $rc == 0 ]] || { cat "$work/health" >&2; fail "health on the Unix socket exited $rc"; }
for service in Session Device Memory Observe Stream Event Copy Random Nvtx Comm Group Profile; do
  grep -Eq "^gpumux\.v1\.$service +unix://$sock +SERVING$" "$work/health" ||
    { cat "$work/health" >&2; fail "health does not show gpumux.v1.$service SERVING"; }
done
grep -Eq "^gpumux\.v1\.Admin +unix://$sock\.admin +SERVING$" "$work/health" ||
  { cat "$work/health" >&2; fail "health does not show Admin SERVING on the admin socket"; }
grep -Eq '^ +1  gpumux host device 1 +ok$' "$work/health" ||
  { cat "$work/health" >&2; fail "health does not show device 1 ok"; }

rc=0
"$gpumux" --address "$tcp" health > "$work/health.tcp" 2>&1 || rc=$?
[[ $rc == 0 ]] || { cat "$work/health.tcp" >&2; fail "health over TCP exited $rc"; }
grep -Eq "^gpumux\.v1\.Observe +$tcp +SERVING$" "$work/health.tcp" ||
  { cat "$work/health.tcp" >&2; fail "health over TCP does not show Observe SERVING"; }
grep -Eq "^gpumux\.v1\.Memory +$tcp +not served over TCP$" "$work/health.tcp" ||
  { cat "$work/health.tcp" >&2; fail "health over TCP does not say Memory is not served there"; }

rc=0
"$gpumux" --address "$work/nobody.sock" health > "$work/health.none" 2>&1 || rc=$?
[[ $rc == 1 ]] || { cat "$work/health.none" >&2; fail "health with no daemon exited $rc, not 1"; }
grep -q "^gpumux: cannot reach gpumuxd at $work/nobody.sock: " "$work/health.none" ||
  { cat "$work/health.none" >&2; fail "health with no daemon does not say it cannot reach it"; }

# --- top --once, on the socket and over TCP ---------------------------------
check_once() {  # FILE WHAT
  grep -Eq '^GPU 0  gpumux host device 0 \(host\)$' "$1" || { cat "$1" >&2; fail "$2: no GPU 0"; }
  grep -Eq '^GPU 1  ' "$1" || { cat "$1" >&2; fail "$2: no GPU 1"; }
  grep -Eq '^ +[0-9]+  trainer +[0-9]+  pod-a +ml/trainer-0 +48\.00 MiB +48\.00 MiB +48\.00 MiB +0$' "$1" ||
    { cat "$1" >&2; fail "$2: no trainer row with 48 MiB"; }
  grep -Eq '^ +[0-9]+  evaluator +[0-9]+  [^ ]+ +- +8\.00 MiB' "$1" ||
    { cat "$1" >&2; fail "$2: no evaluator row"; }
  local trainer evaluator
  trainer=$(grep -n '  trainer ' "$1" | cut -d: -f1)
  evaluator=$(grep -n '  evaluator ' "$1" | cut -d: -f1)
  ((trainer < evaluator)) || { cat "$1" >&2; fail "$2: not sorted by allocated bytes"; }
  if grep -q $'\e' "$1"; then fail "$2: escape codes in --once output"; fi
}
"$gpumux" --address "$sock" top --once > "$work/once" || fail "top --once exited $?"
check_once "$work/once" "top --once"
"$gpumux" --address "$tcp" top --once > "$work/once.tcp" || fail "top --once over TCP exited $?"
check_once "$work/once.tcp" "top --once over TCP"
rc=0
"$gpumux" --address "$sock" top > "$work/notty" 2>&1 || rc=$?
[[ $rc == 2 ]] && grep -q 'stdout is not one; --once prints one frame' "$work/notty" ||
  { cat "$work/notty" >&2; fail "top without a terminal exited $rc without saying why"; }

# --- top in a terminal --------------------------------------------------------
pane() {
  tmux -S "$tmux_socket" capture-pane -p -t top > "$work/pane" 2> "$work/pane.err" ||
    { cat "$work/pane.err" >&2; tmux -S "$tmux_socket" list-sessions >&2 || true; fail "capture-pane failed"; }
}
wait_pane() {  # PATTERN WHAT: until the screen matches (grep -E), 10 s at most
  for _ in $(seq 100); do
    pane
    grep -Eq -- "$1" "$work/pane" && return 0
    sleep 0.1
  done
  cat "$work/pane" >&2
  fail "$2"
}
line_of() { grep -n -- "$1" "$work/pane" | head -1 | cut -d: -f1; }
start_top() {  # the shell around it ignores C-c (top sets its own handler) and says how top ended
  tmux -S "$tmux_socket" new-session -d -x 200 -y 50 -s top \
    "trap '' INT; '$gpumux' --address '$sock' top --interval=0.2; echo top-exited-\$?; sleep 600"
}

# A session that outlives both tops keeps the tmux server up: without it,
# a top's session that ends takes the server with it, and the next tmux
# command can reach the server while it exits ("server exited
# unexpectedly"). remain-on-exit keeps a pane whose command died on the
# screen, so a failure shows what it printed.
tmux -S "$tmux_socket" new-session -d -s keep 'sleep 600'
tmux -S "$tmux_socket" set-option -g remain-on-exit on
start_top
wait_pane '  trainer ' "top does not show the trainer"
wait_pane '  evaluator ' "top does not show the evaluator"
grep -q 'sort: allocated$' "$work/pane" || { cat "$work/pane" >&2; fail "top's header does not say the sort"; }
grep -Eq '^GPU 1  gpumux host device 1' "$work/pane" || { cat "$work/pane" >&2; fail "top shows no GPU 1"; }
(($(line_of '  trainer ') < $(line_of '  evaluator '))) ||
  { cat "$work/pane" >&2; fail "top does not sort by allocated bytes first"; }
for sort in reserved peak "session id"; do
  tmux -S "$tmux_socket" send-keys -t top s
  wait_pane "sort: $sort\$" "s did not switch the sort to $sort"
done
(($(line_of '  evaluator ') < $(line_of '  trainer '))) ||
  { cat "$work/pane" >&2; fail "the sort by session id did not change the order"; }
tmux -S "$tmux_socket" send-keys -t top a
wait_pane 'sort: allocated$' "a did not pick the sort by allocated bytes"

# A smaller window: drawn again to its size.
tmux -S "$tmux_socket" resize-window -t top -x 100 -y 20
wait_pane '^SESSION  CLIENT' "top did not redraw after the resize"
awk 'length($0) > 100 { exit 1 }' "$work/pane" || { cat "$work/pane" >&2; fail "lines wider than the window"; }

# The daemon goes away under it: the error shows, top keeps retrying and
# comes back with the new daemon (whose sessions are none).
stop_daemon
wait_pane '^error: ' "top does not show the daemon's absence"
wait_pane '^retrying every 0.2s' "top does not say it retries"
start_daemon
wait_pane '^0 sessions' "top did not come back when the daemon did"
tmux -S "$tmux_socket" send-keys -t top q
wait_pane '^top-exited-0$' "q did not end top with exit 0"

# C-c (SIGINT) ends it too, and gives the terminal back (the shell prints).
tmux -S "$tmux_socket" kill-session -t top
start_top
wait_pane '^SESSION  CLIENT' "the second top did not draw"
tmux -S "$tmux_socket" send-keys -t top C-c
wait_pane '^top-exited-0$' "C-c did not end top with exit 0"
if grep -q '^SESSION  CLIENT' "$work/pane"; then
  cat "$work/pane" >&2
  fail "top's screen is still there after C-c: the terminal was not restored"
fi
echo "cli_live_test: passed"
