#!/usr/bin/env bash
# Passes when no source of a layer below server/rpc (common, allocator, the
# backends, the core, http, groups) includes a gRPC or protobuf header:
# their headers sit on the system include path, where the build cannot hide
# them, so the sources are read instead.
#   no_wire_below_rpc.sh SOURCE_DIR
set -uo pipefail
cd "$1" || exit 2
found=$(grep -rnE \
  '^\s*#\s*include\s*[<"](grpcpp/|grpc/|grpc\+\+/|google/protobuf/|[^">]*\.pb\.h)' \
  common allocator server/backend server/core server/http server/group)
if [[ -n $found ]]; then
  echo "layering: gRPC or protobuf is included below server/rpc:" >&2
  echo "$found" >&2
  exit 1
fi
echo "layering: no gRPC or protobuf header below server/rpc"
