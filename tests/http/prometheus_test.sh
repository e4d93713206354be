#!/usr/bin/env bash
# A real Prometheus (Debian's) scrapes a real gpumuxd holding two real client
# processes' sessions: each session's allocated bytes, queried with PromQL,
# equal `gpumux stats --session` for it; a session that ends goes stale and
# one whose client is killed counts as crashed; `promtool check metrics` is
# clean on the scrape (sessions, streams, events, an OOM); and every
# expression of the Grafana dashboard evaluates without error.
#   prometheus_test.sh SOURCE_DIR BINARY_DIR
set -euo pipefail
src=$1 bin=$2
fail() { echo "prometheus_test: $*" >&2; exit 1; }
for tool in prometheus promtool curl /usr/bin/python3; do
  command -v "$tool" >/dev/null || fail "$tool is missing: scripts/install-deps.sh installs it"
done
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [[ -n ${KEEP:-} ]] && echo "kept $work" >&2 || rm -rf "$work"
}
trap cleanup EXIT
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# wait_for SECONDS COMMAND...: polls until the command succeeds.
wait_for() {
  local deadline=$((SECONDS + $1)); shift
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

socket=$work/gpumux.sock
"$bin/server/gpumuxd" --socket="$socket" --backend=host --host-devices=2 \
  --host-device-memory=256MiB --metrics-listen=127.0.0.1:0 2>"$work/daemon.log" &
pids+=($!)
metrics_port() { grep -oP 'metrics on http://127\.0\.0\.1:\K[0-9]+' "$work/daemon.log"; }
wait_for 20 metrics_port >/dev/null || { cat "$work/daemon.log" >&2; fail "gpumuxd did not start"; }
port=$(metrics_port)
cli() { "$bin/client/cli/gpumux" --address "unix://$socket" "$@"; }

# Two clients, each holding its session until its stdin closes.
start_client() {  # NAME TENANT POD BYTES FD
  mkfifo "$work/$1.in"
  # Without the other client's fifo: its end of file must come when we close it.
  "$bin/tests/http/gpumux_hold_session" "$socket" "$1" "$2" "$3" "$4" <"$work/$1.in" >"$work/$1.out" 7>&- 8>&- &
  pids+=($!)
  eval "exec $5>\"$work/$1.in\""
}
start_client trainer team-a pod-a 3145728 7
trainer_pid=${pids[-1]}
start_client server team-b pod-b 5242880 8
server_pid=${pids[-1]}
session_of() { grep -oP '^ready \K[0-9]+' "$work/$1.out"; }
wait_for 20 session_of trainer >/dev/null || fail "the trainer client did not start"
wait_for 20 session_of server >/dev/null || fail "the server client did not start"
trainer=$(session_of trainer) server=$(session_of server)

# promtool on a scrape with both sessions, their streams and events, an OOM.
curl -sf "http://127.0.0.1:$port/metrics" >"$work/scrape.txt"
grep -q "^gpumux_session_streams{.*session=\"$trainer\"" "$work/scrape.txt" || fail "no streams series"
grep -q "^gpumux_device_ooms_total{gpu=\"0\"} 2$" "$work/scrape.txt" || { grep ooms "$work/scrape.txt" >&2; fail "the OOMs are not counted"; }
if ! lint=$(promtool check metrics <"$work/scrape.txt" 2>&1); then
  echo "$lint" >&2
  fail "promtool check metrics failed"
fi
[[ -z $lint ]] || fail "promtool check metrics said: $lint"
echo "promtool check metrics: clean on $(wc -l <"$work/scrape.txt") lines"

# Prometheus, scraping every second.
prom_port=$(free_port)
cat >"$work/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: gpumux
    static_configs:
      - targets: ["127.0.0.1:$port"]
YAML
promtool check config "$work/prometheus.yml" >/dev/null
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" --log.level=warn 2>"$work/prometheus.log" 7>&- 8>&- &
pids+=($!)
wait_for 60 curl -sf "http://127.0.0.1:$prom_port/-/ready" -o /dev/null ||
  { cat "$work/prometheus.log" >&2; fail "Prometheus did not become ready"; }

# query PROMQL: prints the JSON answer; fails unless its status is success.
query() {
  local answer
  answer=$(curl -s -G "http://127.0.0.1:$prom_port/api/v1/query" --data-urlencode "query=$1")
  /usr/bin/python3 -c 'import json,sys; a=json.loads(sys.argv[1]); sys.exit(0 if a.get("status")=="success" else 1)' "$answer" ||
    { echo "query '$1' failed: $answer" >&2; return 1; }
  echo "$answer"
}
# value PROMQL: the one sample's value, or nothing.
value() {
  query "$1" | /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if len(r)==1 else "")'
}
has_value() { [[ -n $(value "$1") ]]; }

for session in "$trainer" "$server"; do
  promql="gpumux_session_allocated_bytes{job=\"gpumux\",gpu=\"0\",session=\"$session\"}"
  wait_for 30 has_value "$promql" || fail "Prometheus has no $promql"
  got=$(value "$promql")
  want=$(cli stats --session "$session" --json |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["allocated_bytes.all.current"])')
  [[ $got == "$want" ]] || fail "session $session: Prometheus says $got allocated bytes, gpumux stats $want"
  echo "session $session: $got allocated bytes, in Prometheus and in gpumux stats"
done
pod=$(value 'sum by (pod) (gpumux_session_allocated_bytes{pod="pod-b"})')
[[ $pod == 5242880 ]] || fail "pod-b's bytes: $pod"

# The trainer ends its session: its series go stale at the next scrape.
exec 7>&-
wait "$trainer_pid" || fail "the trainer client failed"
gone() { [[ -z $(value "gpumux_session_allocated_bytes{session=\"$trainer\"}") ]]; }
wait_for 30 gone || fail "session $trainer's series did not go stale"
echo "session $trainer ended: its series went stale"
# The server's client is killed: the daemon counts a crash.
kill -KILL "$server_pid"
wait "$server_pid" 2>/dev/null || true
crashed() { [[ $(value 'gpumux_sessions_ended_total{reason="crashed"}') == 1 ]]; }
wait_for 30 crashed || fail "the killed client's session was not counted as crashed"
closed=$(value 'gpumux_sessions_ended_total{reason="closed"}')
[[ $closed == 1 ]] || fail "sessions closed: $closed"
wait_for 30 has_value 'gpumux_reclaimed_allocated_bytes_total > 0' ||
  fail "the killed client's bytes were not counted as reclaimed"
echo "the killed client's session: counted as crashed, its bytes as reclaimed"

# Every expression of the Grafana dashboard, with its variables filled in as
# Grafana would: the All value of instance and gpu, a rate interval of 1m.
dashboard=$src/deploy/grafana/gpumux-dashboard.json
count=0
while IFS= read -r expr; do
  query "$expr" >/dev/null || fail "dashboard expression failed: $expr"
  count=$((count + 1))
done < <(/usr/bin/python3 - "$dashboard" <<'PY'
import json, re, sys
dash = json.load(open(sys.argv[1]))
def fill(e):
    e = e.replace("$__rate_interval", "1m").replace("$__interval", "15s")
    return re.sub(r"\$\{?(instance|gpu)\}?", ".*", e)
def walk(panels):
    for p in panels:
        for t in p.get("targets", []):
            print(fill(t["expr"]))
        walk(p.get("panels", []))
walk(dash["panels"])
for v in dash["templating"]["list"]:
    q = v.get("query")
    if isinstance(q, dict):
        m = re.match(r"label_values\((.*),\s*\w+\)$", q["query"])
        print(fill(m.group(1)))
PY
)
((count > 10)) || fail "only $count dashboard expressions"
echo "all $count expressions of the Grafana dashboard evaluate"
echo "prometheus_test: passed"
