# vmpod: virtual machines as plain Kubernetes Pods.
#
#   make test    install what is missing, build the test guest, run every test
#   make bench   benchmarks and measurements, printed as tables
#   make build   the binaries, into _output/bin

SHELL := /bin/bash
# Debian's machines have Go in /usr/local/go; go-installed tools in ~/go/bin.
export PATH := $(PATH):/usr/local/go/bin:$(HOME)/go/bin
GO ?= go
OUT := $(CURDIR)/_output
GUEST_DIR ?= $(OUT)/guest
# Counts, not durations: a duration races Go 1.26's fuzz coordinator at its
# deadline ("context deadline exceeded" with no crasher, golang/go#75804).
FUZZTIME ?= 50000x

# Tests that boot the guest find it here.
export VMPOD_GUEST_DIR := $(GUEST_DIR)

.PHONY: all deps guest build test unit fuzz bench clean demo demo-down e2e nodevm kind

all: build

deps:
	@hack/install-deps.sh
	@hack/critest/install.sh

guest: deps
	@hack/guest/build.sh $(GUEST_DIR)

build: deps
	$(GO) build -o $(OUT)/bin/vm-runtime ./cmd/vm-runtime
	CGO_ENABLED=0 $(GO) build -o $(OUT)/bin/containerd-shim-vmpod-v2 ./cmd/containerd-shim-vmpod-v2
	CGO_ENABLED=0 $(GO) build -o $(OUT)/bin/vmpod-qemu ./cmd/vmpod-qemu

test: deps guest
	$(GO) vet -tags e2e,nodevm,systemdnode,kind ./...
	$(GO) test -count=1 -timeout 30m ./...
	@$(MAKE) --no-print-directory fuzz
	@$(MAKE) --no-print-directory nodevm
	@$(MAKE) --no-print-directory e2e
	@$(MAKE) --no-print-directory kind

# vmpod on a cgroup v2 + systemd node (kind's containerd config, the
# installer, a VM pod under a systemd pod slice) and with the cgroupfs
# driver on cgroup v2: a node booted as a TCG VM over this machine's root
# (test/nodevm builds only with the tag nodevm; about 2 minutes).
nodevm: deps guest
	$(GO) test -tags nodevm -count=1 -timeout 20m -v ./test/nodevm

# A cluster in network namespaces running a VM pod (a containerd node, and
# a VM-only node whose kubelet talks to vm-runtime cri)
# (hack/local-up.sh builds etcd, kube-apiserver, kubelet, kubectl and the
# scheduler from the pinned modules, cached in _output/).
demo: deps guest
	@hack/local-up.sh

demo-down:
	@hack/local-down.sh

# vmpod on a kind cluster, installed as a user installs it (test/kind
# builds only with the tag kind): kind's node image and vmpod's images
# built offline (cached in Docker and _output/kind), `kind create cluster`,
# `kubectl apply -k manifests/`, a VM Deployment and Service, uninstall,
# `kind delete cluster`. Phase times in _output/kind/phases.txt.
kind: deps guest
	$(GO) test -tags kind -count=1 -timeout 60m -v ./test/kind

# The end-to-end tests against a fresh local cluster, removed afterwards
# (test/e2e builds only with the tag e2e: a plain go test ./... skips it).
e2e: deps guest
	VMPOD_LOCAL_NO_DEMO=1 hack/local-up.sh || { hack/local-down.sh; exit 1; }
	set -a; . _output/local/env; set +a; $(GO) test -tags e2e -count=1 -timeout 40m -v ./test/e2e; rc=$$?; hack/local-down.sh || rc=1; exit $$rc

# A short run of each fuzz target over what users write (FuzzParse's inputs
# are whole capability captures: minimizing one would take the whole run);
# the seed corpora
# live in each package's testdata/fuzz/.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzAnnotations$$' -fuzztime $(FUZZTIME) ./pkg/vmspec
	$(GO) test -run '^$$' -fuzz '^FuzzFrontDoorsAgree$$' -fuzztime $(FUZZTIME) ./pkg/vmspec
	$(GO) test -run '^$$' -fuzz '^FuzzCRITranslation$$' -fuzztime $(FUZZTIME) ./pkg/cri
	$(GO) test -run '^$$' -fuzz '^FuzzDomain$$' -fuzztime $(FUZZTIME) ./pkg/convert
	$(GO) test -run '^$$' -fuzz '^FuzzDomainXML$$' -fuzztime $(FUZZTIME) ./pkg/convert
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 200x ./pkg/host
	$(GO) test -run '^$$' -fuzz '^FuzzReadHeader$$' -fuzztime $(FUZZTIME) ./internal/qcow2
	$(GO) test -run '^$$' -fuzz '^FuzzReadCheckpoint$$' -fuzztime $(FUZZTIME) ./pkg/vm
	$(GO) test -run '^$$' -fuzz '^FuzzReadPodCheckpoint$$' -fuzztime $(FUZZTIME) ./pkg/cri
	$(GO) test -run '^$$' -fuzz '^FuzzRenameSaveData$$' -fuzztime $(FUZZTIME) ./pkg/virt/libvirt

# One table per area, each with its references measured in the same run
# (docs/benchmarks.md): a VM pod's start phases next to libvirt's
# define+start of the same XML and bare QEMU (5 starts of each); the
# shim's memory with 10 VM pods, and 20 VM pods started at once in pod
# cgroups limited as the kubelet limits them (BenchmarkDensity: start to
# /init p50/p95, memory used against limits plus RuntimeClass overhead;
# docs/overhead.md), and what virtio-fs shares cost (BenchmarkShareMemory:
# a VM with 0, 1 and 4 shares; docs/overhead.md); the scheduler plugin's cost
# (BenchmarkSchedulingThroughput: pods/s with the default plugins and with
# VMPlacement on 1,000 and 5,000 nodes, their ratio, and the time per pod
# of each extension point; docs/scheduler.md); then the pieces (converter,
# jail, image intake, the overlay, exec through the guest agent); then day
# 2 (BenchmarkResize: a live resize, Update to the guest having the new
# vCPUs or RAM; BenchmarkDefaultRoom: what the node's default room in
# vCPUs costs a boot and QEMU's memory; BenchmarkCheckpointRestore: a checkpoint's pause and cost,
# its files, and a restore against a cold boot; docs/day2.md).
bench: deps guest
	@echo '== start'
	$(GO) test -run '^$$' -bench BenchmarkStartPhases -benchtime 5x -timeout 20m ./pkg/shim
	@echo '== memory'
	$(GO) test -run '^$$' -bench BenchmarkShimFootprint -benchtime 1x -timeout 60m ./test/containerd
	$(GO) test -run '^$$' -bench BenchmarkDensity -benchtime 1x -timeout 15m ./test/containerd
	$(GO) test -run '^$$' -bench BenchmarkShareMemory -benchtime 1x -timeout 15m ./pkg/vm
	@echo '== scheduler'
	$(GO) test -run '^$$' -bench BenchmarkFilterScore -benchmem ./pkg/scheduler/vmplacement
	@# The in-process API server and etcd log hundreds of shutdown warnings: all go to a file, the rest is shown.
	set -o pipefail; $(GO) test -run '^$$' -bench BenchmarkSchedulingThroughput -benchtime 1x -timeout 30m ./test/integration/scheduler 2>&1 | \
	  tee $(OUT)/bench-scheduler.log | grep -v -E '^([EWI][0-9]{4} |\{"level":)'
	@echo '== pieces'
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/convert
	$(GO) test -run '^$$' -bench 'BenchmarkJail|BenchmarkNoJail' -benchtime 50x ./pkg/jail
	$(GO) test -run '^$$' -bench BenchmarkImageIntake -benchtime 20x ./pkg/vm
	$(GO) test -run '^$$' -bench BenchmarkOverlay -benchtime 20x ./internal/qcow2
	$(GO) test -run '^$$' -bench BenchmarkExec -benchtime 20x ./pkg/vm
	@echo '== day 2'
	$(GO) test -run '^$$' -bench BenchmarkResize -benchtime 5x -timeout 15m ./pkg/vm
	$(GO) test -run '^$$' -bench BenchmarkDefaultRoom -benchtime 3x -timeout 15m ./pkg/vm
	$(GO) test -run '^$$' -bench BenchmarkCheckpointRestore -benchtime 3x -timeout 15m ./pkg/vm

clean:
	rm -rf $(OUT)/bin
