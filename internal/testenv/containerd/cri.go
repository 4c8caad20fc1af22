package containerd

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Crictl runs crictl against this containerd, inside the node's network
// namespace (so exec, attach and port-forward reach the streaming server on
// its loopback), with a config file of its own (the host's
// /etc/crictl.yaml is never read) and --timeout Options.CRITimeout. It
// returns stdout; the error carries stderr.
func (c *Containerd) Crictl(t testing.TB, args ...string) (string, error) {
	t.Helper()
	return c.crictl(c.opts.CRITimeout, args...)
}

func (c *Containerd) crictl(timeout time.Duration, args ...string) (string, error) {
	// The process bound is a little longer than crictl's own.
	return c.Run(timeout+10*time.Second, filepath.Join(c.BinDir, "crictl"), c.crictlArgs(timeout, args...)...)
}

func (c *Containerd) crictlArgs(timeout time.Duration, args ...string) []string {
	return append([]string{
		"--config", filepath.Join(c.Root, "crictl.yaml"),
		"--runtime-endpoint", c.Endpoint,
		"--image-endpoint", c.Endpoint,
		"--timeout", timeout.String(),
	}, args...)
}

// CrictlCommand is the command Crictl runs, not started, for a crictl
// that runs until the test ends it (port-forward): its process is crictl
// itself (nsenter enters the namespaces and execs it), which the caller
// must end, by Process.Kill or ctx.
func (c *Containerd) CrictlCommand(ctx context.Context, args ...string) *exec.Cmd {
	return c.Command(ctx, filepath.Join(c.BinDir, "crictl"), c.crictlArgs(c.opts.CRITimeout, args...)...)
}

// MustCrictl is Crictl that fails the test on error.
func (c *Containerd) MustCrictl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := c.Crictl(t, args...)
	if err != nil {
		t.Fatalf("crictl: %v", err)
	}
	return out
}

// Ctr runs `ctr --address ADDRESS ARGS...` (namespace k8s.io unless ARGS
// say otherwise: put "-n", "other" first) with a 5 minute bound.
func (c *Containerd) Ctr(t testing.TB, args ...string) (string, error) {
	t.Helper()
	argv := []string{"--address", c.Address}
	if len(args) == 0 || (args[0] != "-n" && args[0] != "--namespace") {
		argv = append(argv, "--namespace", "k8s.io")
	}
	argv = append(argv, args...)
	return c.Run(5*time.Minute, filepath.Join(c.BinDir, "ctr"), argv...)
}

// ImportImage imports an OCI image-layout (or docker save) archive into the
// k8s.io namespace, where CRI sees it, and unpacks it for CRI's snapshotter.
// The image keeps the name in the archive's io.containerd.image.name or
// org.opencontainers.image.ref.name annotation (ctr's transfer-service
// import prefers those to its generated "import-DATE" prefix).
func (c *Containerd) ImportImage(t testing.TB, archive string) {
	t.Helper()
	start := time.Now()
	if _, err := c.Ctr(t, "images", "import", "--snapshotter", c.Snapshotter, archive); err != nil {
		t.Fatalf("import %s: %v", archive, err)
	}
	t.Logf("containerd: imported %s in %v", filepath.Base(archive), time.Since(start).Round(time.Millisecond))
}

// WriteJSON writes v as JSON to Root/configs/NAME and returns the path, for
// `crictl runp POD.json` and `crictl create POD CONTAINER.json POD.json`.
// crictl reads the CRI messages as encoding/json writes them from
// k8s.io/cri-api's types: protobuf field names, enums as numbers.
func (c *Containerd) WriteJSON(t testing.TB, name string, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(c.Root, "configs", name)
	if err := writeFile(p, b); err != nil {
		t.Fatal(err)
	}
	return p
}

// RunPod runs `crictl runp --runtime HANDLER` (HANDLER "" is containerd's
// default, runc) and returns the sandbox ID.
func (c *Containerd) RunPod(t testing.TB, pod *runtimeapi.PodSandboxConfig, handler string) string {
	t.Helper()
	path := c.WriteJSON(t, "pod-"+pod.Metadata.Namespace+"-"+pod.Metadata.Name+".json", pod)
	args := []string{"runp"}
	if handler != "" {
		args = append(args, "--runtime", handler)
	}
	return strings.TrimSpace(c.MustCrictl(t, append(args, path)...))
}

// CreateContainer runs `crictl create POD CONTAINER.json POD.json` (never
// pulling) and returns the container ID.
func (c *Containerd) CreateContainer(t testing.TB, podID string, ctr *runtimeapi.ContainerConfig, pod *runtimeapi.PodSandboxConfig) string {
	t.Helper()
	pp := c.WriteJSON(t, "pod-"+pod.Metadata.Namespace+"-"+pod.Metadata.Name+".json", pod)
	cp := c.WriteJSON(t, "ctr-"+pod.Metadata.Namespace+"-"+pod.Metadata.Name+"-"+ctr.Metadata.Name+".json", ctr)
	return strings.TrimSpace(c.MustCrictl(t, "create", "--no-pull", podID, cp, pp))
}

// PodStatus is the part of `crictl inspectp -o json` tests look at.
type PodStatus struct {
	ID    string
	State string // SANDBOX_READY or SANDBOX_NOTREADY
	IP    string
	// NetNSPath is the pod's network namespace; it resolves inside Command
	// (containerd's mount namespace), e.g.
	// c.Run(d, "nsenter", "--net="+s.NetNSPath, "ip", "addr").
	NetNSPath string
	// PID is the sandbox task's process (the pause process with runc), 0
	// when containerd does not report one.
	PID int
	// Raw is the whole inspectp output.
	Raw string
}

// InspectPod runs `crictl inspectp -o json ID`.
func (c *Containerd) InspectPod(t testing.TB, id string) PodStatus {
	t.Helper()
	out := c.MustCrictl(t, "inspectp", "-o", "json", id)
	var v struct {
		Status struct {
			ID      string `json:"id"`
			State   string `json:"state"`
			Network struct {
				IP string `json:"ip"`
			} `json:"network"`
		} `json:"status"`
		Info struct {
			PID         int `json:"pid"`
			RuntimeSpec struct {
				Linux struct {
					Namespaces []struct {
						Type string `json:"type"`
						Path string `json:"path"`
					} `json:"namespaces"`
				} `json:"linux"`
			} `json:"runtimeSpec"`
		} `json:"info"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("crictl inspectp %s: %v", id, err)
	}
	s := PodStatus{ID: v.Status.ID, State: v.Status.State, IP: v.Status.Network.IP, PID: v.Info.PID, Raw: out}
	for _, ns := range v.Info.RuntimeSpec.Linux.Namespaces {
		if ns.Type == "network" {
			s.NetNSPath = ns.Path
		}
	}
	return s
}

// StopRemovePod runs `crictl stopp` and `crictl rmp`.
func (c *Containerd) StopRemovePod(t testing.TB, id string) {
	t.Helper()
	c.MustCrictl(t, "stopp", id)
	c.MustCrictl(t, "rmp", id)
}

// NewPodConfig is the pod sandbox config a kubelet would send for a pod with
// no special settings: log directory under LogDir, cgroup parent
// CgroupParent/pod<UID> (cgroupfs), pod network, a PID namespace per
// container, and annotations from ANNOTATIONS (may be nil).
func (c *Containerd) NewPodConfig(name, namespace, uid string, annotations map[string]string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Uid: uid, Namespace: namespace},
		Hostname:     name,
		LogDirectory: filepath.Join(c.LogDir, namespace+"_"+name+"_"+uid),
		Labels: map[string]string{
			"io.kubernetes.pod.name":      name,
			"io.kubernetes.pod.namespace": namespace,
			"io.kubernetes.pod.uid":       uid,
		},
		Annotations: annotations,
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent:    c.CgroupParent + "/pod" + uid,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: namespaces()},
		},
	}
}

// NewContainerConfig is a container config for IMAGE logging to
// NAME/0.log under the pod's log directory.
func NewContainerConfig(name, image string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: image},
		LogPath:  name + "/0.log",
		Linux: &runtimeapi.LinuxContainerConfig{
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: namespaces()},
		},
	}
}

// namespaces are the kubelet's for a pod without host namespaces or
// shareProcessNamespace.
func namespaces() *runtimeapi.NamespaceOption {
	return &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_POD,
		Pid:     runtimeapi.NamespaceMode_CONTAINER,
		Ipc:     runtimeapi.NamespaceMode_POD,
	}
}

// Resources is CPU (millicores: a quota over a 100ms period, and shares, as
// the kubelet computes them) and memory (bytes) limits for a container's or
// a pod's Linux config; 0 leaves one unset.
func Resources(milliCPU, memoryBytes int64) *runtimeapi.LinuxContainerResources {
	r := &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: memoryBytes}
	if milliCPU > 0 {
		r.CpuPeriod = 100000
		r.CpuQuota = milliCPU * 100000 / 1000
		r.CpuShares = milliCPU * 1024 / 1000
	}
	return r
}
