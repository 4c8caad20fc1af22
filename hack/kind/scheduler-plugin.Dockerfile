# kube-scheduler v1.37.2 with the VMPlacement plugin (cmd/scheduler-plugin).
# Build from the repository root:
#   docker build -f hack/kind/scheduler-plugin.Dockerfile -t localhost/vmpod/scheduler-plugin:dev .
FROM golang:1.26-trixie AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath \
      -ldflags "-X k8s.io/component-base/version.gitVersion=v1.37.2" \
      -o /out/scheduler-plugin ./cmd/scheduler-plugin

FROM debian:trixie-slim
COPY --from=build /out/scheduler-plugin /usr/local/bin/scheduler-plugin
USER 65532:65532
ENTRYPOINT ["scheduler-plugin"]
