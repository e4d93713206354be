#!/usr/bin/env bash
# Checks deploy/systemd/gpumuxd.service.in, filled in as CMake's
# configure_file would with GPUMUXD_BINARY's directory as the bindir:
# - `systemd-analyze verify` prints nothing (it exits 0 on many warnings,
#   such as an unknown key, so its output decides, not its status); a copy
#   with a misspelt key must make it print, so the check is not vacuous;
# - `systemd-analyze security --offline=yes` (systemd 250 and later) rates
#   the unit's exposure at most 3.1, the unit's own score: each hardening
#   directive it drops raises the score (NoNewPrivileges= alone to 3.3), so
#   a lost one fails here. The exposure left is what the unit explains it
#   cannot close: devices and /proc for CUDA, the TCP listeners, no
#   system call filter yet.
# Neither needs user gpumux to exist: systemd 252 resolves User= only when
# it starts the service.
#   systemd_test.sh GPUMUXD_BINARY
# Exit 77 (skipped) without systemd-analyze.
set -euo pipefail

if ! command -v systemd-analyze > /dev/null; then
  echo "systemd_test: skipped: systemd-analyze not found (Debian package systemd)"
  exit 77
fi
binary=$1
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
template=$source_dir/deploy/systemd/gpumuxd.service.in
threshold=31  # tenths: 3.1
fail() { echo "systemd_test: $*" >&2; exit 1; }
[[ -x $binary ]] || fail "$binary is not an executable"
[[ $(basename "$binary") == gpumuxd ]] || fail "$binary is not named gpumuxd, as ExecStart expects"
bindir=$(cd "$(dirname "$binary")" && pwd)

work=$(mktemp -d /tmp/gpumux-systemd-test-XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir "$work/unit" "$work/broken"
unit=$work/unit/gpumuxd.service
sed "s|@CMAKE_INSTALL_FULL_BINDIR@|$bindir|g" "$template" > "$unit"
if grep -n '@[A-Za-z_]*@' "$unit"; then fail "$template has a variable the test does not fill"; fi

# --recursive-errors=no: only this unit's problems, not those of the
# system's units it names (network.target, multi-user.target).
verify() { systemd-analyze verify --recursive-errors=no "$1" > "$work/verify.log" 2>&1; }
rc=0
verify "$unit" || rc=$?
if ((rc != 0)) || [[ -s $work/verify.log ]]; then
  fail "systemd-analyze verify (exit $rc): $(cat "$work/verify.log")"
fi
echo "systemd-analyze verify: no warnings"

sed 's/^ProtectSystem=/ProtectSystm=/' "$unit" > "$work/broken/gpumuxd.service"
verify "$work/broken/gpumuxd.service" || true
grep -q "Unknown key.*ProtectSystm" "$work/verify.log" ||
  fail "systemd-analyze verify did not report a misspelt key: $(cat "$work/verify.log")"

if ! systemd-analyze --help | grep -q -- '--offline='; then
  echo "systemd_test: systemd-analyze security --offline is missing (systemd < 250): not rated"
  exit 0
fi
rc=0
systemd-analyze security --offline=yes --threshold=$threshold "$unit" > "$work/security.log" 2>&1 ||
  rc=$?
score=$(grep -o 'Overall exposure level for gpumuxd.service: [0-9.]*' "$work/security.log" || true)
[[ -n $score ]] || fail "systemd-analyze security printed no exposure level: $(cat "$work/security.log")"
echo "systemd-analyze security: ${score#Overall }"
((rc == 0)) || fail "exposure over ${threshold:0:1}.${threshold:1}: $(grep '✗' "$work/security.log")"
echo "systemd_test: ok"
