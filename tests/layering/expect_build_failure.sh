#!/usr/bin/env bash
# Builds TARGET of BUILD_DIR and passes when the compiler refuses it because
# HEADER cannot be found (the layer's include roots do not have it), or, with
# --builds, when it builds.
#   expect_build_failure.sh BUILD_DIR TARGET HEADER
#   expect_build_failure.sh --builds BUILD_DIR TARGET
set -uo pipefail
if [[ $1 == --builds ]]; then
  cmake --build "$2" --target "$3" || { echo "layering: $3 should build and does not" >&2; exit 1; }
  exit 0
fi
build_dir=$1 target=$2 header=$3
out=$(cmake --build "$build_dir" --target "$target" 2>&1)
status=$?
if ((status == 0)); then
  echo "layering: $target builds, but it includes $header, which its layer must not reach" >&2
  exit 1
fi
# gcc's words, then clang's.
if ! grep -qE "$header: No such file or directory|'$header' file not found" <<<"$out"; then
  echo "$out" >&2
  echo "layering: $target failed for another reason than the unreachable $header" >&2
  exit 1
fi
echo "layering: $target does not build: $header is not among its include roots"
