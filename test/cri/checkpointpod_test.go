package cri_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vmpod/vmpod/internal/testenv/ckptarchive"
	"github.com/vmpod/vmpod/pkg/vm"
)

// TestCheckpointPod: the CRI's pod-level calls, through a Go CRI client
// (crictl has none). CheckpointPod writes the pod's VM into an empty dir
// while it runs on; bad requests (options, a dir in use, the wrong
// containers) are refused, leaving the dir as it was. RestorePod, once the
// pod is gone, makes a new pod whose container is created, not started;
// started, its guest goes on where it was (counter, uptime) and leases the
// new pod's IP. A checkpoint without the node's signature, or asked for
// with containers it does not have, is refused with no sandbox left.
func TestCheckpointPod(t *testing.T) {
	n, ref, podID, id, ip1 := startCounting(t)
	rs := n.runtimeClient()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	guestFloat := func(id, cmd string) float64 {
		t.Helper()
		out := n.must("exec", "-s", id, "sh", "-c", cmd)
		f, err := strconv.ParseFloat(strings.Fields(out)[0], 64)
		if err != nil {
			t.Fatalf("%s: %q: %v", cmd, out, err)
		}
		return f
	}
	time.Sleep(time.Second)
	before, upBefore := guestFloat(id, "cat /run/counter"), guestFloat(id, "cat /proc/uptime")

	out := filepath.Join(t.TempDir(), "pod-checkpoint")
	if err := os.Mkdir(out, 0o700); err != nil {
		t.Fatal(err)
	}
	used := t.TempDir()
	if err := os.WriteFile(filepath.Join(used, "keep"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		req  *runtimeapi.CheckpointPodRequest
		want string
	}{
		{"options", &runtimeapi.CheckpointPodRequest{PodSandboxId: podID, OutputPath: out, ContainerIds: []string{id}, Options: map[string]string{"leave-running": "true"}},
			"options: vmpod takes none, got leave-running"},
		{"a dir in use", &runtimeapi.CheckpointPodRequest{PodSandboxId: podID, OutputPath: used, ContainerIds: []string{id}}, "is not empty"},
		{"no containers", &runtimeapi.CheckpointPodRequest{PodSandboxId: podID, OutputPath: out}, "must be exactly the pod's running containers"},
		{"a container twice", &runtimeapi.CheckpointPodRequest{PodSandboxId: podID, OutputPath: out, ContainerIds: []string{id, id}}, "each once"},
		{"a relative dir", &runtimeapi.CheckpointPodRequest{PodSandboxId: podID, OutputPath: "ckpt", ContainerIds: []string{id}}, "an absolute path is required"},
	} {
		_, err := rs.CheckpointPod(ctx, c.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckpointPod with %s: %v; want InvalidArgument saying %q", c.name, err, c.want)
		}
	}
	if entries, _ := os.ReadDir(out); len(entries) != 0 {
		t.Errorf("refused checkpoints left %v in the dir", entries)
	}
	if entries, _ := os.ReadDir(used); len(entries) != 1 {
		t.Errorf("a refused checkpoint changed the dir in use: %v", entries)
	}

	start := time.Now()
	if _, err := rs.CheckpointPod(ctx, &runtimeapi.CheckpointPodRequest{PodSandboxId: podID, OutputPath: out, ContainerIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	t.Logf("CheckpointPod: %v", time.Since(start).Round(time.Millisecond))
	var files []string
	filepath.WalkDir(out, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(out, p)
			files = append(files, rel)
		}
		return err
	})
	sort.Strings(files)
	if got, want := strings.Join(files, " "), "vm/disk.qcow2 vm/vm.state vm/vmpod.json vm/vmpod.sig vmpod-pod.json"; got != want {
		t.Errorf("the pod checkpoint holds %s, want %s", got, want)
	}
	if st := n.inspect(id); st.State != "CONTAINER_RUNNING" {
		t.Fatalf("after CheckpointPod the VM is %+v", st)
	}
	n.must("stop", "--timeout", "30", id)
	n.must("rm", id)
	n.must("stopp", podID)
	n.must("rmp", podID)

	podConfig := n.restoreConfig("restored", "7e57-c41-0p01")
	ctrConfig := func(name string) *runtimeapi.ContainerConfig { return vmConfig(name, ref) }
	unsigned := copyTree(t, out)
	if err := os.Remove(filepath.Join(unsigned, "vm", vm.CheckpointSignature)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		req  *runtimeapi.RestorePodRequest
		code codes.Code
		want string
	}{
		{"options", &runtimeapi.RestorePodRequest{CheckpointPath: out, Config: podConfig, ContainerConfigs: []*runtimeapi.ContainerConfig{ctrConfig("vm")},
			Options: map[string]string{"x": "y"}}, codes.InvalidArgument, "vmpod takes none, got x"},
		{"another container", &runtimeapi.RestorePodRequest{CheckpointPath: out, Config: podConfig, ContainerConfigs: []*runtimeapi.ContainerConfig{ctrConfig("web")}},
			codes.InvalidArgument, `"web" is not in the checkpoint, which has vm`},
		{"no containers", &runtimeapi.RestorePodRequest{CheckpointPath: out, Config: podConfig}, codes.InvalidArgument, "0 given, the checkpoint has vm"},
		{"another handler", &runtimeapi.RestorePodRequest{CheckpointPath: out, Config: podConfig, ContainerConfigs: []*runtimeapi.ContainerConfig{ctrConfig("vm")},
			RuntimeHandler: "runc"}, codes.InvalidArgument, `runtime_handler "runc"`},
		{"not a checkpoint", &runtimeapi.RestorePodRequest{CheckpointPath: n.dir, Config: podConfig, ContainerConfigs: []*runtimeapi.ContainerConfig{ctrConfig("vm")}},
			codes.InvalidArgument, "not a vmpod pod checkpoint"},
		{"unsigned", &runtimeapi.RestorePodRequest{CheckpointPath: unsigned, Config: podConfig, ContainerConfigs: []*runtimeapi.ContainerConfig{ctrConfig("vm")}},
			codes.InvalidArgument, "not signed"},
	} {
		_, err := rs.RestorePod(ctx, c.req)
		if status.Code(err) != c.code || !strings.Contains(err.Error(), c.want) {
			t.Errorf("RestorePod with %s: %v; want %s saying %q", c.name, err, c.code, c.want)
		}
		if pods, err := rs.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{}); err != nil || len(pods.Items) != 0 {
			t.Errorf("RestorePod with %s left sandboxes: %v, %v", c.name, pods, err)
		}
	}

	start = time.Now()
	res, err := rs.RestorePod(ctx, &runtimeapi.RestorePodRequest{CheckpointPath: out, Config: podConfig, ContainerConfigs: []*runtimeapi.ContainerConfig{ctrConfig("vm")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("RestorePod: %v", time.Since(start).Round(time.Millisecond))
	if len(res.RestoredContainers) != 1 || res.RestoredContainers[0].Name != "vm" || res.PodSandboxId == "" {
		t.Fatalf("RestorePod: %+v, want a sandbox and the container vm", res)
	}
	id2 := res.RestoredContainers[0].ContainerId
	if st := n.inspect(id2); st.State != "CONTAINER_CREATED" {
		t.Fatalf("the restored container is %+v, want created, not started", st)
	}
	start = time.Now()
	if _, err := rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id2}); err != nil {
		t.Fatal(err)
	}
	t.Logf("restored: StartContainer to the guest agent answering: %v", n.waitAgent(id2, start).Round(time.Millisecond))
	if c := guestFloat(id2, "cat /run/counter"); c < before {
		t.Errorf("the restored guest's counter is at %v, below the %v before the checkpoint: it started over", c, before)
	}
	if up := guestFloat(id2, "cat /proc/uptime"); up < upBefore {
		t.Errorf("the restored guest's uptime %.1f s is below the %.1f s before the checkpoint: it booted", up, upBefore)
	}
	ip2 := n.podIP(res.PodSandboxId)
	took := ckptarchive.WaitGuestIP(t, start, ip2, ip1, func() (string, error) {
		return n.crictlRun(10*time.Second, "exec", "-s", id2, "cat", "/run/ip")
	})
	t.Logf("restored: StartContainer to the guest holding the new pod IP %s: %v", ip2, took.Round(time.Millisecond))

	n.removePod(id2, res.PodSandboxId)
	n.must("rmi", ref)
	n.stop()
	n.assertNothingLeft()
}

// removePod stops and removes the container id and its pod.
func (n *node) removePod(id, podID string) {
	n.t.Helper()
	n.must("stop", "--timeout", "30", id)
	n.must("rm", id)
	n.must("stopp", podID)
	n.must("rmp", podID)
}

// runtimeClient is a Go CRI client of the node's server, closed at the
// test's end.
func (n *node) runtimeClient() runtimeapi.RuntimeServiceClient {
	n.t.Helper()
	conn, err := grpc.NewClient("unix://"+n.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { conn.Close() })
	return runtimeapi.NewRuntimeServiceClient(conn)
}

// restoreConfig is the config of a pod name (uid uid) for RestorePod.
func (n *node) restoreConfig(name, uid string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: uid},
		Hostname:     name,
		LogDirectory: filepath.Join(n.dir, "logs", name),
		Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: n.cgroup},
	}
}

// vmConfig is the config of a VM container name of image ref, 1 CPU and
// 256 MiB, for RestorePod.
func vmConfig(name, ref string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: ref},
		LogPath:  "vm/0.log",
		Linux: &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{
			MemoryLimitInBytes: 256 << 20, CpuPeriod: 100000, CpuQuota: 100000, CpuShares: 1024}},
	}
}

// copyTree copies the files of dir, one level of subdirs deep, into a new
// temporary dir.
func copyTree(t *testing.T, dir string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o700)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestRestoreWithoutLease: a restored guest whose DHCP client does not
// follow the carrier (the test guest with /run/lease.once, as a one-shot
// client at boot) keeps the address it was saved with, and the pod's
// console says so, naming the pod's address, once the wait for its lease
// is over. Restored through the CRI's pod-level calls, beside nothing.
func TestRestoreWithoutLease(t *testing.T) {
	n, ref, podID, id, ip1 := startCounting(t)
	n.must("exec", "-s", id, "touch", "/run/lease.once")
	rs := n.runtimeClient()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out := filepath.Join(t.TempDir(), "pod-checkpoint")
	if err := os.Mkdir(out, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.CheckpointPod(ctx, &runtimeapi.CheckpointPodRequest{PodSandboxId: podID, OutputPath: out, ContainerIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	n.must("stop", "--timeout", "30", id)
	n.must("rm", id)
	n.must("stopp", podID)
	n.must("rmp", podID)

	res, err := rs.RestorePod(ctx, &runtimeapi.RestorePodRequest{CheckpointPath: out,
		Config: n.restoreConfig("stale", "7e57-c41-0p02"), ContainerConfigs: []*runtimeapi.ContainerConfig{vmConfig("vm", ref)}})
	if err != nil {
		t.Fatal(err)
	}
	id2 := res.RestoredContainers[0].ContainerId
	if _, err := rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id2}); err != nil {
		t.Fatal(err)
	}
	ip2 := n.podIP(res.PodSandboxId)
	logs := n.waitLogs(id2, "vmpod: the restored guest has not asked for this pod's address "+ip2, time.Minute)
	if !strings.Contains(logs, "/run/lease.once: keeping "+ip1+"/") {
		t.Errorf("the guest's console does not show it keeping %s:\n%s", ip1, logs)
	}
	if got := strings.TrimSpace(n.must("exec", "-s", id2, "cat", "/run/ip")); !strings.HasPrefix(got, ip1+"/") {
		t.Errorf("the guest holds %s; want the %s it was saved with", got, ip1)
	}
	n.removePod(id2, res.PodSandboxId)
	n.must("rmi", ref)
	n.stop()
	n.assertNothingLeft()
}
