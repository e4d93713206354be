#!/usr/bin/env bash
# The long chaos run: N client processes (default 8) doing random mixes of every
# operation against a real gpumuxd, one SIGKILLed at random every 50-250 ms,
# KILLS times (default 1000). Prints the chaos test's name=value figures
# (reclaim p50/p99/max, sessions, shared-memory objects, descriptors, threads
# and RSS before and after). Needs a build (scripts/build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${GPUMUX_BUILD_DIR:-build}
kills=1000
clients=8
while (($#)); do
  case "$1" in
    --kills) kills=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    *) echo "usage: scripts/chaos.sh [--kills N] [--clients N]" >&2; exit 2 ;;
  esac
done
GPUMUX_CHAOS_KILLS=$kills GPUMUX_CHAOS_CLIENTS=$clients "$build/tests/chaos/chaos_test"
