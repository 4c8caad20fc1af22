#!/usr/bin/env bash
# Generates the Go code of vmpod's APIs (api/**/*.proto): protoc from
# Debian's protobuf-compiler, with protoc-gen-go and protoc-gen-go-ttrpc
# at the versions go.mod pins. The generated files are committed;
# api/node/v1's test fails when they differ from what this writes.
#
# Usage: hack/gen-api.sh [OUT_DIR]   (default: api/, in place)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/api}
bin=$root/_output/bin/protoc-plugins
mkdir -p "$bin" "$out"
(cd "$root" && GOBIN=$bin go install google.golang.org/protobuf/cmd/protoc-gen-go github.com/containerd/ttrpc/cmd/protoc-gen-go-ttrpc)
cd "$root/api"
mapfile -t protos < <(find . -name '*.proto' | sort)
PATH=$bin:$PATH protoc -I . -I /usr/include \
  --go_out=paths=source_relative:"$out" --go-ttrpc_out=paths=source_relative:"$out" "${protos[@]}"
