#!/usr/bin/env bash
# Runs every command that README.md and docs/*.md show, as written, from the
# repository root, against a gpumuxd started from the build tree
# (build/server/gpumuxd without flags, as scripts/run.sh starts it) on the
# default socket.
#   readme_commands_test.sh SOURCE_DIR BUILD_DIR
#
# The pages are read in order: README.md, then docs/*.md by name. Their
# commands: every line of a ```sh block (a line ending in \ continues on the
# next; a whole-line comment is none), and every inline code span outside the
# fenced blocks that starts with build/ or scripts/ (after any NAME=value
# words), or with gpumuxd, gpumux, cmake, bash or c++ and an argument. A
# fenced block whose info string names a file under /tmp (```cpp
# /tmp/hello.cc) is written to that file before the commands after it run.
# Each command is either run or listed in not_run below with the reason,
# matched by its exact text (a trailing "# comment" aside) in whichever page
# shows it; a listed command that no page shows fails the test, so the list
# stays exact. A command that two pages show runs once. Variables a page
# exports are unset before the next page. A command may run for 120 s, or
# for what timeout_s below says.
#
# Everything runs in a private mount namespace (unshare -m): /run/gpumux,
# /opt/gpumux, /tmp, build/example and build/Testing are fresh tmpfs there,
# and /usr/local a private overlay,
# so the daemon on /run/gpumux/gpumux.sock and what `cmake --install` writes
# are the test's own and a developer's daemon or install is never touched.
# gpumuxd and gpumux, named bare in the prose, are the build tree's (first on
# PATH). A command starting with gpumuxd replaces the test's daemon while it
# runs: it must serve (gpumux devices answers) and stop with exit 0 on
# SIGTERM, or, if it exits by itself, exit 0. No GPU is visible to them
# (CUDA_VISIBLE_DEVICES is empty), so the daemons run the host backend.
set -euo pipefail

source_dir=$(cd "$1" && pwd)
build_dir=$(cd "$2" && pwd)
fail() { echo "readme_commands_test: $*" >&2; exit 1; }

# Commands the test does not run, and why.
declare -A not_run=(
  ["bash scripts/run.sh"]="installs Debian packages and builds gpumuxd and gpumux, then runs gpumuxd in the foreground: the test starts that last step itself (build/server/gpumuxd, no flags)"
  ["bash scripts/test.sh"]="is CI itself: installs packages, rebuilds with -Werror and runs the whole suite, this test included, then the fuzzers"
  ["build/bench/gpumux_profile_bench"]="replays both traces 32 times through a daemon in each mode, plain and under gpumux bottleneck (about six minutes); cli_bottleneck_test and client_profile_test run the same paths"
  ["build/bench/gpumux_group_bench --rounds=60"]="starts two daemons and two plain Gloo processes that move up to 256 MiB three times in each of sixty rounds (about three minutes); group_test runs the same paths"
  ["scripts/fuzz.sh"]="builds the 15 libFuzzer targets with clang, ASan and UBSan and runs each for 30 s (CI runs it from scripts/test.sh)"
  ["scripts/sanitize.sh"]="builds the tree again with clang, ASan and UBSan and runs the whole suite under it (CI runs it from scripts/test.sh)"
  ["scripts/chaos.sh"]="names the chaos script; its run is the next entry"
  ["scripts/chaos.sh --kills 1000"]="1,000 kills 50-250 ms apart take several minutes; the ctest chaos test runs the same code with 50"
  ["scripts/gpu-check"]="names the script; its two commands are in the GPU check block"
  ["scripts/gpu-check bundle --tar"]="a Release build of the whole tree with CUDA into build-gpu/ (many minutes)"
  ["scripts/gpu-check bundle"]="names the bundle command; docs/bundle.md's dry run runs it on this build"
  ["scripts/gpu-check bundle [--tar] [OUTDIR]"]="the bundle command's synopsis; scripts/gpu-check bundle --tar is its run"
  ["BUNDLE_DIR/run-gpu-check"]="runs on a GPU machine; BUNDLE_DIR is the output of the bundle command"
  ["cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DGPUMUX_WITH_CUDA=ON \\
  -DGPUMUX_WITH_NCCL=AUTO -DGPUMUX_BUILD_TESTS=ON -DGPUMUX_BUILD_BENCH=ON"]="what scripts/gpu-check bundle configures: a second build tree with CUDA"
  ["cmake --build build-gpu -j\$(nproc)"]="what scripts/gpu-check bundle builds: the whole tree again with CUDA (many minutes)"
  ["cmake --build"]="names CMake's build step"
  ["scripts/install-deps.sh"]="installs Debian packages with apt-get; scripts/run.sh and scripts/test.sh run it"
  ["bash scripts/build.sh"]="configures and builds the whole tree, which the test runs from (minutes); scripts/test.sh runs it"
  ["scripts/test.sh"]="is CI itself (bash scripts/test.sh)"
  ["scripts/sanitize-config.sh"]="is sourced by scripts/sanitize.sh and scripts/fuzz.sh; alone it does nothing"
  ["scripts/container-test --cuda"]="builds the CUDA image as root with podman and the CUDA toolkit; running it needs a GPU node"
  ["gpumuxd --client-reply-timeout"]="names the flag; it needs a value (the operator's guide has it)"
  ["gpumux bottleneck"]="names the command, which needs a program to run; the bottleneck command in docs/cpp-guide.md runs one"
  ["gpumux profile"]="names the command, which needs a session and a duration; cli_bottleneck_test attaches it to a running program"
  ["gpumux profile --session ID --duration S"]="ID is a placeholder; cli_bottleneck_test attaches a profile to a running program"
  ["scripts/bench-report"]="runs the quick benchmarks (a minute) and rewrites docs/benchmarks.md, a tracked file; the --only compact --output - command runs the same code to stdout"
  ["scripts/bench-report --all"]="every benchmark: about 15 minutes and 14 GiB, and it rewrites docs/benchmarks.md"
  ["scripts/bench-report --only rpc,group"]="the group benchmark takes minutes, and it rewrites docs/benchmarks.md"
  ["scripts/gpu-check run BUNDLE_DIR"]="runs the gpu-labelled tests on a GPU machine; BUNDLE_DIR is the output of the bundle command"
  ["scripts/bundle/gpu-benchmarks.sh"]="the GPU benchmarks, run inside a bundle by run-gpu-check on a GPU machine"
  ["build/bench/gpumux_load_bench"]="64 client processes for 60 s, then 256 sessions: over this test's time budget"
  ["build/bench/gpumux_replay_modes_bench"]="replays both traces through a real daemon with their whole host memory (13 GiB for GPT-2): 14 GiB of memory"
  ["build/client/cli/gpumux --address 127.0.0.1:50051 sessions"]="needs the full-mode gpumuxd above still serving on port 50051, and the test runs each gpumuxd command only until it serves; tcp_full_mode_test runs the CLI over TLS against such a daemon"
  ["scripts/gen-varlen-trace"]="rewrites testdata/trace_gpt2s_infer_varlen.csv.gz; compact_replay_test runs it into a temporary file and compares the result with the committed file byte for byte"
  ["scripts/format.sh"]="rewrites the sources in place; the test runs scripts/format.sh --check, which changes nothing"
  ["scripts/container-test"]="builds the image with podman and runs containers as root: minutes, and too slow for CI; it runs every command of the container block below in its own way"
  ["scripts/make-base-image"]="debootstraps Debian 12 from the network into a podman image (scripts/container-test runs it)"
  ["scripts/make-base-image --cuda-toolkit"]="imports /usr/local/cuda (3 GB) into a podman image (scripts/container-test --cuda runs it)"
  ["podman build --format docker -t gpumux/gpumuxd:0.1.0 ."]="builds the image (scripts/container-test)"
  ["podman build --format docker --target packages -o debs ."]="builds the image's packages stage (scripts/container-test)"
  ["podman volume create gpumux-socket"]="a podman volume for the containers (scripts/container-test)"
  ["podman run -d --name gpumuxd -v gpumux-socket:/run/gpumux -p 9408:9408 -p 50051:50051 gpumux/gpumuxd:0.1.0"]="runs the image built above (scripts/container-test)"
  ['podman run --rm -v gpumux-socket:/run/gpumux --user 20001 --group-add 10001 --network none --entrypoint "" gpumux/gpumuxd:0.1.0 gpumux-client-example']="the client container (scripts/container-test)"
  ["curl -s localhost:9408/metrics | grep ^gpumux_sessions"]="reads the daemon container's /metrics (scripts/container-test)"
  ["podman stop gpumuxd"]="stops the daemon container (scripts/container-test)"
  ["kubectl apply -k deploy/kubernetes/overlays/host"]="needs a Kubernetes cluster; kubernetes_test renders, lints and checks every kustomization offline"
  ["kubectl apply -k deploy/kubernetes/overlays/cuda"]="needs a Kubernetes cluster with GPU nodes; kubernetes_test checks it offline"
  ["kubectl apply -k deploy/kubernetes/examples/client"]="needs a Kubernetes cluster running the host overlay; kubernetes_test checks it offline"
  ["cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr"]="would reconfigure the build tree the tests run from; the Dockerfile's build stage configures this way"
  ["cmake --build build && (cd build && cpack -G DEB)"]="rebuilds and packs the tree (minutes); the Dockerfile's build stage packs, and scripts/container-test installs the packages in a fresh container"
  ["apt-get install ./build/gpumuxd_0.1.0_amd64.deb ./build/libgpumux-dev_0.1.0_amd64.deb"]="installs into this machine's /usr; scripts/container-test installs the packages in a fresh container"
  ["usermod -aG gpumux USER"]="changes this machine's users; USER is a placeholder"
  ["echo 'GPUMUXD_ARGS=--metrics-listen=0.0.0.0:9408' > /etc/default/gpumuxd && systemctl restart gpumuxd"]="needs the package installed under a running systemd"
)

# A line the output must match (grep -E), for the commands whose output
# carries their point.
declare -A expect=(
  ["build/client/cli/gpumux devices"]="^ +0  gpumux host device 0 +host +8\.00 GiB"
  ["build/client/cli/gpumux stats --device 0 --json"]='"allocated_bytes\.all\.current": 0'
  ["build/client/cli/gpumux summary --device 0"]="PyTorch CUDA memory summary, device ID 0"
  ["build/client/cli/gpumux empty-cache"]="^released "
  ["build/client/cli/gpumux tenant-limit pod-a 4GiB"]="^tenant 'pod-a': limit 4294967296 bytes \(4\.00 GiB\) on every device$"
  ["build/client/cli/gpumux tenants"]="^pod-a +0 +4\.00 GiB +0 bytes +0 bytes +-$"
  ["build/client/cli/gpumux replay testdata/trace_gpt2s_train_b8_s1024.csv.gz"]="^peak_reserved=13061062656$"
  ["build/client/cli/gpumux replay testdata/trace_resnet50_train_b64.csv.gz --address unix:///run/gpumux/gpumux.sock"]="^peak_reserved=6803161088$"
  ["build/bench/gpumux_replay_inprocess testdata/trace_resnet50_train_b64.csv.gz --repeat 300"]="^peak_reserved=6803161088$"
  ["build/bench/gpumux_compact_bench"]="^compact_worst_reserved_over_requested=1\.00"
  ["build/client/cli/gpumux replay testdata/trace_gpt2s_infer_varlen.csv.gz --allocator-conf compact_segments:True"]="^reserved_over_requested=1\.00"
  ["build/bench/gpumux_replay_inprocess testdata/trace_gpt2s_train_b8_s1024.csv.gz --repeat 300"]="^peak_reserved=13061062656$"
  ["build/client/cli/gpumux bottleneck -- build/tests/client/gpumux_bottleneck_target wait"]="^Device-bound: "
  ["GPUMUX_ALLOCATION=daemon build/bench/gpumux_rpc_bench"]="^alloc_free_over_noop_p50="
  ["build/bench/gpumux_stream_bench"]="^h2d_staging_over_memcpy="
  ["build/bench/gpumux_lease_bench"]="^pressure_release_over_lease_p50="
  ["build/bench/gpumux_metrics_bench"]="^alloc_free_scraped_over_quiet_p50="
  ["cmake --build build/example && build/example/client_example unix:///run/gpumux/gpumux.sock"]='imported 1048576 bytes in session [0-9]+: "hello from gpumux"'
  ["build/example/client_example_pc unix:///run/gpumux/gpumux.sock"]='imported 1048576 bytes in session [0-9]+: "hello from gpumux"'
  ["gpumuxd --host-device-memory=16GiB"]="^ +0  gpumux host device 0 +host +16\.00 GiB"
  ["gpumuxd --help"]="--host-device-memory"
  ["/tmp/hello"]="^hello: 1048576 bytes allocated$"
  ["PYTHONPATH=build/python /usr/bin/python3 /tmp/hello.py"]="^b'hello' 1048576$"
  ["PYTHONPATH=build/python /usr/bin/python3 bench/python/alloc_bench.py build/server/gpumuxd"]="^python_alloc_drop_over_torch_empty="
  ["scripts/bench-report --list"]="^replay +quick "
  ["scripts/bench-report --only compact --output -"]="^\\| \\[compact\\]\\(#compact\\) \\| .compact_worst_reserved_over_requested. \\| 1\\.00"
  ["env -i PATH=/usr/bin:/bin GPU_CHECK_SKIP_BENCH=1 /tmp/b/run-gpu-check"]="^== summary: .*; PASS$"
  ["cd build && ctest --print-labels"]="^  mode-daemon$"
  ["cd build && ctest -R ByteSizeTest --output-on-failure"]="100% tests passed"
  ["python3 -c 'import ctypes; lib = ctypes.CDLL(\"build/client/c_abi/libgpumux_alloc.so\"); lib.gpumux_malloc.restype = ctypes.c_void_p; print(lib.gpumux_malloc(ctypes.c_size_t(1 << 20), 0, None) is not None)'"]="^True$"
)

# Memory a command takes while it runs (GiB of MemAvailable), checked first
# so that a small machine fails with the reason instead of an OOM kill.
declare -A needs_memory_gib=(
  ["build/client/cli/gpumux replay testdata/trace_resnet50_train_b64.csv.gz --address unix:///run/gpumux/gpumux.sock"]=8
)

# Seconds a command may run, where 120 is not enough.
declare -A timeout_s=(
  ["GPUMUX_BUNDLE_BUILD_DIR=build GPUMUX_BUNDLE_NO_BUILD=1 GPUMUX_BUNDLE_LABEL=cpu \\
  GPUMUX_BUNDLE_TEST_REGEX='Philox|ByteSize|HostBackend' scripts/gpu-check bundle --tar /tmp/b"]=300
)

# Into a private mount namespace first.
if [[ -z ${GPUMUX_README_TEST_IN_NAMESPACE:-} ]]; then
  export GPUMUX_README_TEST_IN_NAMESPACE=1
  if unshare -m --propagation private true 2>/dev/null; then
    exec unshare -m --propagation private bash "$0" "$source_dir" "$build_dir"
  elif unshare -r -m true 2>/dev/null; then  # not root: root in a user namespace
    exec unshare -r -m bash "$0" "$source_dir" "$build_dir"
  fi
  fail "needs a private mount namespace (unshare -m as root, or unshare -r -m) so that its gpumuxd on" \
       "/run/gpumux/gpumux.sock and its installs into /opt/gpumux and /usr/local stay its own"
fi

# /tmp first: a tmpfs in the namespace only, which also holds the overlays'
# upper layers. They stay out of the build tree, where tools such as
# scripts/gpu-check look for executables. A source or build tree under /tmp
# (a clone there) is bound back from the /tmp the tmpfs hides.
exec {host_tmp}</tmp
mount -t tmpfs gpumux-readme-test /tmp
for dir in "$source_dir" "$build_dir"; do
  if [[ $dir == /tmp/* && ! -d $dir ]]; then
    mkdir -p "$dir"
    # (not canonicalized: the magic link must lead to the hidden /tmp, not its name)
    mount --no-canonicalize --bind "/proc/self/fd/$host_tmp/${dir#/tmp/}" "$dir"
  fi
done
scratch=/tmp/.gpumux-readme-test
mkdir -p "$scratch"
# private_dir DIR: a fresh tmpfs on DIR; where DIR does not exist, its parent
# becomes an overlay whose writes stay in the namespace, and DIR is made there.
overlay() {
  local dir=$1 name
  name=$(tr / _ <<<"$dir")
  mkdir -p "$scratch/$name/upper" "$scratch/$name/work"
  mount -t overlay gpumux-readme-test -o "lowerdir=$dir,upperdir=$scratch/$name/upper,workdir=$scratch/$name/work" "$dir"
}
private_dir() {
  if [[ ! -d $1 ]]; then overlay "$(dirname "$1")"; mkdir -p "$1"; fi
  mount -t tmpfs gpumux-readme-test "$1"
}
private_dir /run/gpumux
private_dir /opt/gpumux
overlay /usr/local
if [[ $build_dir != "$source_dir/build" ]]; then  # the README says build/
  [[ -d $source_dir/build ]] || mkdir "$source_dir/build"  # git ignores it
  mount --bind "$build_dir" "$source_dir/build"
fi
# A ctest run here (and scripts/gpu-check's) writes its log under
# build/Testing, where the ctest that runs this test keeps its own.
mkdir -p "$build_dir/Testing"
mount -t tmpfs gpumux-readme-test "$build_dir/Testing"
# The example's build (build/example in the README) stays in the namespace too.
mkdir -p "$build_dir/example"
mount -t tmpfs gpumux-readme-test "$build_dir/example"
work=$scratch/work
mkdir -p "$work"
export PATH=$build_dir/server:$build_dir/client/cli:$PATH
unset GPUMUX_ADDRESS
export CUDA_VISIBLE_DEVICES=  # --backend=auto is host, as in CI, and a GPU stays untouched
cd "$source_dir"

# The commands, page by page in order: "PAGE<TAB>LINE<TAB>KIND<TAB>TEXT"
# records, NUL-terminated. KIND is "run", or "write PATH" for a block to
# write to PATH (TEXT is its content).
pages=(README.md)
for doc in docs/*.md; do [[ -e $doc ]] && pages+=("$doc"); done
awk '
  function emit(kind, text) { printf "%s\t%d\t%s\t%s%c", FILENAME, start, kind, text, 0 }
  FNR == 1 { fence = ""; pending = ""; file = "" }
  fence == "" && /^```/ {
    info = substr($0, 4); split(info, words, /[ \t]+/)
    fence = words[1]; if (fence == "") fence = "plain"
    if (fence ~ /^(bash|shell|console|zsh)$/) { print FILENAME ":" FNR ": a ```" fence " block: write ```sh" > "/dev/stderr"; exit 1 }
    file = words[2]; body = ""; start = FNR + 1
    if (file != "" && file !~ /^\/tmp\/[^ ]+$/) { print FILENAME ":" FNR ": a block names " file ": write it under /tmp" > "/dev/stderr"; exit 1 }
    next
  }
  fence != "" && /^```[ \t]*$/ {
    if (file != "") emit("write " file, body)
    fence = ""; file = ""; next
  }
  file != "" { body = body $0 "\n"; next }
  fence == "sh" {
    if (pending == "") start = FNR
    line = pending $0
    if (line ~ /\\$/) { pending = line "\n"; next }
    pending = ""
    if (line !~ /^[ \t]*(#|$)/) emit("run", line)
    next
  }
  fence != "" { next }
  {
    rest = $0
    while (match(rest, /`[^`]+`/)) {
      span = substr(rest, RSTART + 1, RLENGTH - 2)
      rest = substr(rest, RSTART + RLENGTH)
      if (span ~ /^([A-Za-z_][A-Za-z0-9_]*=[^ ]* +)*(\.\/)?(build|scripts)\/[^ ]/ ||
          span ~ /^(gpumuxd|gpumux|cmake|bash|c\+\+) +[^ ]/) {
        start = FNR
        emit("run", span)
      }
    }
  }
' "${pages[@]}" > "$work/commands" || fail "could not read the commands from ${pages[*]}"

key_of() {  # the command without a trailing comment ("  # ...")
  sed -E 's/[[:space:]]+# .*$//' <<<"$1"
}

daemon_pid=
cleanup() {
  if [[ -n $daemon_pid ]]; then kill "$daemon_pid" 2>/dev/null || true; fi
}
trap cleanup EXIT

wait_until_served() {  # PID LOG: until gpumux devices answers, or PID exits
  for _ in $(seq 200); do
    kill -0 "$1" 2>/dev/null || return 1
    build/client/cli/gpumux devices > /dev/null 2>&1 && return 0
    sleep 0.05
  done
  cat "$2" >&2
  fail "gpumuxd (pid $1) did not serve within 10 s"
}
start_daemon() {
  build/server/gpumuxd < /dev/null > "$work/daemon.log" 2>&1 &
  daemon_pid=$!
  wait_until_served "$daemon_pid" "$work/daemon.log" ||
    { cat "$work/daemon.log" >&2; fail "build/server/gpumuxd did not start"; }
}
stop_daemon() {
  kill -TERM "$daemon_pid"
  local rc=0
  wait "$daemon_pid" || rc=$?
  daemon_pid=
  [[ $rc == 0 ]] || { cat "$work/daemon.log" >&2; fail "build/server/gpumuxd exited $rc on SIGTERM"; }
}

# run_daemon_command TEXT OUT: a gpumuxd command in place of the test's daemon.
run_daemon_command() {
  local rc=0
  stop_daemon
  bash -c "exec $1" < /dev/null > "$2.daemon" 2>&1 &
  daemon_pid=$!
  if wait_until_served "$daemon_pid" "$2.daemon"; then
    build/client/cli/gpumux devices > "$2" 2>&1 || rc=$?
    kill -TERM "$daemon_pid"
  fi
  wait "$daemon_pid" || rc=$?
  daemon_pid=
  cat "$2.daemon" >> "$2"
  start_daemon
  return "$rc"
}

start_daemon
declare -A seen=()
failures=0
ran=0
skipped=0
page=
page_exports=$(compgen -e)
while IFS=$'\t' read -r -d '' where line kind text; do
  if [[ $where != "$page" ]]; then  # a new page: the last page's exports go
    for name in $(comm -13 <(sort <<<"$page_exports") <(compgen -e | sort)); do unset "$name"; done
    page=$where
    page_exports=$(compgen -e)
  fi
  if [[ $kind == write\ * ]]; then
    printf '%s' "$text" > "${kind#write }"
    continue
  fi
  key=$(key_of "$text")
  [[ -n ${seen[$key]:-} ]] && continue
  seen[$key]=1
  if [[ -n ${not_run[$key]+x} ]]; then
    echo "not run: $where:$line: $key (${not_run[$key]})"
    skipped=$((skipped + 1))
    continue
  fi
  need=${needs_memory_gib[$key]:-0}
  if (( need > 0 )); then
    available=$(awk '/^MemAvailable:/ { print int($2 / 1048576) }' /proc/meminfo)
    if (( available < need )); then
      echo "FAILED: $where:$line: $key needs $need GiB of free memory, the machine has $available GiB"
      failures=$((failures + 1))
      continue
    fi
  fi
  out=$work/out.$ran
  rc=0
  start=$SECONDS
  case ${text%% *} in
    gpumuxd | */gpumuxd) run_daemon_command "$text" "$out" || rc=$? ;;
    export) eval "$text" > "$out" 2>&1 || rc=$? ;;  # for the commands after it
    *) timeout "${timeout_s[$key]:-120}" bash -c "$text" < /dev/null > "$out" 2>&1 || rc=$? ;;
  esac
  ran=$((ran + 1))
  if [[ $rc != 0 ]]; then
    echo "FAILED: $where:$line: $key exited $rc; its output ends:"
    tail -n 20 "$out" | sed 's/^/    /'
    failures=$((failures + 1))
  elif [[ -n ${expect[$key]:-} ]] && ! grep -Eq -- "${expect[$key]}" "$out"; then
    echo "FAILED: $where:$line: $key printed no line matching /${expect[$key]}/; its output ends:"
    tail -n 20 "$out" | sed 's/^/    /'
    failures=$((failures + 1))
  else
    echo "ok: $where:$line: $key ($((SECONDS - start)) s)"
  fi
done < "$work/commands"

# The test's daemon is left as it started: no session, nothing reserved.
sessions=$(build/client/cli/gpumux sessions --json)
[[ $sessions == "[]" ]] || { echo "FAILED: sessions left after the commands: $sessions"; failures=$((failures + 1)); }
stats=$(build/client/cli/gpumux stats --device 0 --json)  # not piped into grep -q: pipefail and SIGPIPE
grep -q '"reserved_bytes.all.current": 0,' <<<"$stats" ||
  { echo "FAILED: device 0 still has memory reserved after the commands"; failures=$((failures + 1)); }
stop_daemon

for key in "${!not_run[@]}" "${!expect[@]}" "${!needs_memory_gib[@]}" "${!timeout_s[@]}"; do
  if [[ -z ${seen[$key]:-} ]]; then
    echo "FAILED: the test names a command no page shows: $key"
    failures=$((failures + 1))
  fi
done
(( ran > 0 )) || fail "found no command in ${pages[*]}"
(( failures == 0 )) || fail "$failures of the pages' commands failed ($ran run, $skipped listed as not run)"
echo "readme_commands_test: $ran commands of ${#pages[@]} pages ran as written, $skipped listed as not run"
