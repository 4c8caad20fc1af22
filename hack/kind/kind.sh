#!/usr/bin/env bash
# kind, with hack/kind/docker first on its PATH: on a host where
# `docker run --privileged` fails, kind's nodes start with every
# capability but CAP_SYS_RESOURCE instead; elsewhere kind runs unchanged.
# Uses the kind on PATH, else _output/kind/tools/kind
# (GOBIN=_output/kind/tools go install sigs.k8s.io/kind@v0.33.0).
#   hack/kind/kind.sh create cluster --config hack/kind/cluster.yaml --image localhost/vmpod/kind-node:v1.37.2
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
kind=$(command -v kind || echo "$here/../../_output/kind/tools/kind")
PATH=$here/docker:$PATH exec "$kind" "$@"
