#!/usr/bin/env bash
# Checks the Kubernetes manifests under deploy/kubernetes:
# - yamllint --strict (deploy/kubernetes/.yamllint) over the sources;
# - every kustomization directory renders with `kubectl kustomize`, and its
#   output passes yamllint --strict and check_kubernetes_schema.py (each
#   object against Kubernetes 1.22's API schema of python3-kubernetes; the
#   ServiceMonitor against a hand-written one);
# - check_kubernetes_wiring.py: the base and every overlay render a DaemonSet
#   whose --socket lies on a hostPath mount, a Service that selects its pods
#   and a ServiceMonitor that selects the Service; each example client
#   reaches its overlay's socket (same host path, the socket's gid, the host
#   namespaces legacy CUDA IPC needs) and its env refers only to variables
#   defined before (GPUMUX_LABELS);
# - negative cases: broken copies of the renders (nodeSelektor,
#   containerPortt, a container without a name, a ServiceMonitor field
#   typo, an env reference to an undefined variable, a selector that misses)
#   must fail both checkers with the expected paths, so that neither can
#   pass vacuously.
#   kubernetes_test.sh SOURCE_DIR
# Exit 77 (skipped) without kubectl, which is no Debian package.
set -euo pipefail

source_dir=$(cd "$1" && pwd)
kube=$source_dir/deploy/kubernetes
tests=$source_dir/tests/deploy
config=$kube/.yamllint
python=/usr/bin/python3
fail() { echo "kubernetes_test: $*" >&2; exit 1; }

if ! command -v kubectl > /dev/null; then
  echo "kubernetes_test: skipped: kubectl not found (it is not a Debian package; install it" \
       "from https://kubernetes.io/releases/download/)"
  exit 77
fi
command -v yamllint > /dev/null || fail "yamllint not found: run scripts/install-deps.sh"
"$python" -c 'import kubernetes, yaml' 2> /dev/null ||
  fail "$python cannot import kubernetes and yaml: run scripts/install-deps.sh"

work=$(mktemp -d /tmp/gpumux-kubernetes-test-XXXXXX)
trap 'rm -rf "$work"' EXIT

yamllint --strict -c "$config" "$kube" || fail "yamllint: the sources under $kube"
echo "yamllint: sources ok"

mapfile -t dirs < <(cd "$kube" && find . \( -name kustomization.yaml -o -name kustomization.yml \
                      -o -name Kustomization \) -printf '%h\n' | sed 's|^\./||' | sort)
((${#dirs[@]} > 0)) || fail "no kustomization under $kube"
declare -A render
for dir in "${dirs[@]}"; do
  out=$work/${dir//\//-}.yaml
  kubectl kustomize "$kube/$dir" > "$out" 2> "$work/kustomize.err" ||
    fail "kubectl kustomize $dir: $(cat "$work/kustomize.err")"
  render[$dir]=$out
  yamllint --strict -c "$config" "$out" || fail "yamllint: the rendering of $dir"
  "$python" "$tests/check_kubernetes_schema.py" "$out" || fail "schema: the rendering of $dir"
  echo "$dir: renders, yamllint ok, schema ok"
done

# Which example client goes with which overlay; every example must be here.
declare -A client_of=([overlays/host]=examples/client [overlays/cuda]=examples/client-cuda)
for dir in "${dirs[@]}"; do
  case $dir in
    base)
      "$python" "$tests/check_kubernetes_wiring.py" --daemon "${render[$dir]}" ||
        fail "wiring: $dir" ;;
    overlays/*)
      client=${client_of[$dir]:-}
      [[ -n $client && -n ${render[$client]:-} ]] ||
        fail "overlay $dir has no example client in client_of (or it did not render)"
      "$python" "$tests/check_kubernetes_wiring.py" --daemon "${render[$dir]}" \
        --client "${render[$client]}" || fail "wiring: $dir with $client" ;;
    examples/*)
      printf '%s\n' "${client_of[@]}" | grep -qx "$dir" ||
        fail "example $dir is no overlay's client in client_of, so nothing checks its wiring" ;;
    *) fail "kustomization $dir is neither base, an overlay nor an example" ;;
  esac
  [[ $dir == examples/* ]] || echo "$dir: wiring ok"
done

# expect_failure LOG PATTERN...: the checker failed and printed each pattern.
expect_failure() {
  local log=$1 rc=$2
  shift 2
  ((rc != 0)) || fail "a checker passed a broken copy ($log); its output: $(cat "$log")"
  for pattern in "$@"; do
    grep -qF -- "$pattern" "$log" || fail "broken copy: no report of '$pattern' in: $(cat "$log")"
  done
}

broken=$work/broken-cuda.yaml
sed -e 's/^      nodeSelector:$/      nodeSelektor:/' \
    -e 's/^        - containerPort: 50051$/        - containerPortt: 50051/' \
    -e '/^        name: gpumuxd$/d' \
    -e 's/^    interval: 15s$/    intervall: 15s/' \
    "${render[overlays/cuda]}" > "$broken"
rc=0
"$python" "$tests/check_kubernetes_schema.py" "$broken" > "$work/schema.log" 2>&1 || rc=$?
expect_failure "$work/schema.log" "$rc" \
  "DaemonSet gpumux/gpumuxd: spec.template.spec.nodeSelektor: unknown field of V1PodSpec" \
  "spec.template.spec.containers[0].ports[0].containerPortt: unknown field of V1ContainerPort" \
  "spec.template.spec.containers[0].ports[0].containerPort: required field" \
  "spec.template.spec.containers[0].name: required field of V1Container missing" \
  "ServiceMonitor gpumux/gpumuxd: spec.endpoints[0].intervall: unknown field of Endpoint"
echo "schema: the broken copy fails as it should:"
sed 's/^/  /' "$work/schema.log"

broken_client=$work/broken-client.yaml
# shellcheck disable=SC2016 # $(...) is Kubernetes' expansion, not the shell's
sed 's/=$(POD_NAMESPACE),/=$(POD_NAMESPACES),/' "${render[examples/client]}" > "$broken_client"
broken_host=$work/broken-host.yaml
sed 's|^    app.kubernetes.io/name: gpumuxd$|    app.kubernetes.io/name: gpumux-daemon|' \
  "${render[overlays/host]}" > "$broken_host"
rc=0
"$python" "$tests/check_kubernetes_wiring.py" --daemon "$broken_host" --client "$broken_client" \
  > "$work/wiring.log" 2>&1 || rc=$?
expect_failure "$work/wiring.log" "$rc" \
  "GPUMUX_LABELS refers to \$(POD_NAMESPACES), which no earlier env entry defines" \
  "Service gpumux/gpumuxd: selector {'app.kubernetes.io/name': 'gpumux-daemon'} does not select" \
  "ServiceMonitor gpumux/gpumuxd: selector {'app.kubernetes.io/name': 'gpumuxd'} selects no Service"
echo "wiring: the broken copies fail as they should:"
sed 's/^/  /' "$work/wiring.log"
echo "kubernetes_test: ok (${#dirs[@]} kustomizations)"
