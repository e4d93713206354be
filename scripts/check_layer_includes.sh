#!/usr/bin/env bash
# Fails when a layer above the backend includes a backend implementation's
# own files: server/allocator, server/core and server/rpc reach a backend
# only through its interface (server/backend/*.h). Run by ctest (label cpu).
set -euo pipefail
root=${1:-$(dirname "$0")/..}
if hits=$(grep -rnE '#include[[:space:]]+"server/backend/(host|cuda)/' \
    "$root/server/allocator" "$root/server/core" "$root/server/rpc"); then
  echo "these files include a backend implementation; use server/backend/device_backend.h:" >&2
  echo "$hits" >&2
  exit 1
fi
echo "no layer above the backend includes server/backend/host/ or server/backend/cuda/"
