//go:build nodevm

package nodevm

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	systemd "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	appsv1 "k8s.io/api/apps/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"sigs.k8s.io/yaml"

	"github.com/vmpod/vmpod/internal/testenv/containerd"
	"github.com/vmpod/vmpod/internal/testenv/nodevm"
	"github.com/vmpod/vmpod/internal/testguest"
	"github.com/vmpod/vmpod/pkg/vmd"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// The VM pod: 256 MiB, one vCPU, under TCG (the node has no KVM).
const (
	guestBytes = 256 << 20
	firstLine  = "Linux version" // the guest kernel's first serial line
)

// vmLimit is the memory.max QEMU's cgroup must have: guest + overhead,
// the overhead for the vCPUs of the room the node gives the pod, which
// sets no vmpod.io/max-vcpus and boots the image's kernel: the node's
// CPUs, at most vm-runtime's default --default-max-vcpus.
func vmLimit() uint64 {
	room := max(1, min(runtime.NumCPU(), vmd.DefaultMaxVCPUs))
	return guestBytes + vmspec.OverheadFor(false).Bytes(guestBytes, room)
}

// inside runs in the node VM, as root, with the share as a place to leave
// facts for the host.
func inside(t *testing.T) {
	if st, err := os.Stat("/run/systemd/system"); err != nil || !st.IsDir() {
		t.Fatalf("not a systemd node: %v", err)
	}
	facts, err := os.Create(filepath.Join(nodevm.ShareDir, factsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer facts.Close()
	fact := func(format string, a ...any) { fmt.Fprintf(facts, format+"\n", a...) }

	t.Run("podcgroup", func(t *testing.T) {
		start := time.Now()
		cmd := exec.Command(filepath.Join(nodevm.ShareDir, "podcgroup.test"), "-test.run", "Driver", "-test.v", "-test.timeout", "2m")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("pkg/podcgroup tests: %v\n%s", err, out)
		}
		for _, want := range []string{"--- PASS: TestCgroupfsDriver", "--- PASS: TestSystemdDriver"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("pkg/podcgroup: no %q in\n%s", want, out)
			}
		}
		fact("pkg/podcgroup driver tests on cgroup v2 (cgroupfs and systemd): passed in %.1fs", time.Since(start).Seconds())
	})
	t.Run("systemd", func(t *testing.T) { kindNode(t, fact) })
	t.Run("cgroupfs", func(t *testing.T) { cgroupfsNode(t, fact) })
	t.Run("cri-systemd", func(t *testing.T) { criSystemdNode(t, fact) })
}

// criSystemdNode: vm-runtime cri on the systemd node, as a VM-only node's
// kubelet uses it: RuntimeConfig says systemd (the node's init), and a VM
// pod whose cgroup_parent is a systemd pod slice gets QEMU in the scope
// cri-vmpod-<id>.scope of that slice, limited to guest + overhead; the
// pod's removal leaves no QEMU, scope or cgroup.
func criSystemdNode(t *testing.T, fact func(string, ...any)) {
	start := time.Now()
	repo := os.Getenv("VMPOD_REPO")
	if _, err := os.Stat("/etc/cni/net.d/10-vmpod.conflist"); err != nil {
		cniSetup(t) // the systemd subtest made it, unless it failed first
	}
	// Short: QEMU's sockets go a few levels below it (108-byte limit).
	dir, err := os.MkdirTemp("/tmp", "vcri-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	ref := serveTestGuest(t, dir)
	sock := filepath.Join(dir, "cri.sock")
	logf, err := os.Create(filepath.Join(dir, "cri.log"))
	must(t, err)
	defer logf.Close()
	server := exec.Command(filepath.Join(nodevm.ShareDir, "vm-runtime"), "cri", "--listen", "unix://"+sock,
		"--state-root", filepath.Join(dir, "s"), "--netns-dir", filepath.Join(dir, "netns"),
		"--capabilities-cache", filepath.Join(dir, "caps"))
	server.Stdout, server.Stderr = logf, logf
	must(t, server.Start())
	t.Cleanup(func() {
		_ = server.Process.Kill()
		_ = server.Wait()
		if t.Failed() {
			t.Logf("vm-runtime cri's log:\n%s", readFile(t, logf.Name()))
		}
	})
	c := crictlAt(t, filepath.Join(repo, "_output", "bin"), "unix://"+sock, "--image-endpoint", "unix://"+sock)
	crictl, mustCrictl := c.run, c.must
	waitFor(t, "vm-runtime cri", time.Minute, func() bool { _, err := crictl("version"); return err == nil })
	if out := mustCrictl("runtime-config"); !strings.Contains(out, "SYSTEMD") {
		t.Errorf("crictl runtime-config = %q on a systemd node, want the systemd driver", out)
	}
	mustCrictl("pull", ref)

	const uid = "7e570000c0de"
	slice := "kubepods-besteffort-pod" + uid + ".slice"
	startSlice(t, slice, vmLimit()+64<<20)
	podID, id := c.runGuest(dir, uid, slice, ref, fact, "cri-systemd")

	qemus := procs("qemu-system-x86")
	if len(qemus) != 1 {
		t.Fatalf("QEMUs running: %v, want the pod's one", qemus)
	}
	pid, _, _ := strings.Cut(qemus[0], ":")
	sliceDir := "/kubepods.slice/kubepods-besteffort.slice/" + slice
	wantCg := sliceDir + "/cri-vmpod-" + id + ".scope"
	if got := cgroupOf(t, atoi(t, pid)); got != wantCg {
		t.Errorf("QEMU %s is in %s, want %s", qemus[0], got, wantCg)
	}
	gotMax := strings.TrimSpace(readFile(t, filepath.Join("/sys/fs/cgroup", wantCg, "memory.max")))
	if gotMax != strconv.FormatUint(vmLimit(), 10) {
		t.Errorf("QEMU's memory.max = %s, want guest + overhead = %d", gotMax, vmLimit())
	}
	fact("cri-systemd: RuntimeConfig systemd; QEMU's cgroup %s, memory.max %s", wantCg, gotMax)

	// The guest is still booting its kernel (nested TCG): it does not see
	// the ACPI button, so stop ends in a hard stop after the grace time.
	mustCrictl("stop", "--timeout", "3", id)
	mustCrictl("rm", id)
	mustCrictl("stopp", podID)
	mustCrictl("rmp", podID)
	waitFor(t, "QEMU and its scope to go", 30*time.Second, func() bool {
		return len(procs("qemu-system-x86")) == 0 &&
			strings.TrimSpace(sh(t, "systemctl", "list-units", "--all", "--plain", "--no-legend", "cri-vmpod-*")) == ""
	})
	if sub := subdirs(filepath.Join("/sys/fs/cgroup", sliceDir)); len(sub) > 0 {
		t.Errorf("cgroups left under the pod slice: %v", sub)
	}
	stopSlice(t, slice)
	fact("cri-systemd: after rmp no QEMU, scope or cgroup left; whole run %.1fs", time.Since(start).Seconds())
}

// serveTestGuest pushes the test guest's containerdisk to a registry on
// the node's loopback for the test's life and returns its reference there.
func serveTestGuest(t *testing.T, dir string) string {
	img, err := testguest.OpenArchive(testguest.Archive(t), filepath.Join(dir, "oci"))
	must(t, err)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	ref := strings.TrimPrefix(srv.URL, "http://") + "/vmpod/test-guest:v1"
	r, err := name.ParseReference(ref)
	must(t, err)
	must(t, remote.Write(r, img))
	return ref
}

// kindNode: containerd from kind's node config as a systemd service, the
// installer as its DaemonSet runs it, a VM pod under a systemd pod slice.
func kindNode(t *testing.T, fact func(string, ...any)) {
	start := time.Now()
	repo := os.Getenv("VMPOD_REPO")
	bin := filepath.Join(repo, "_output", "bin")
	kindConfig := readFile(t, filepath.Join(nodevm.ShareDir, "kind-config.toml"))

	// The node's containerd, as kind's node image has it. Its overlayfs
	// snapshotter cannot put an overlay on the node's overlay root.
	must(t, os.MkdirAll("/var/lib/containerd", 0o711))
	sh(t, "mount", "-t", "tmpfs", "tmpfs", "/var/lib/containerd")
	must(t, os.MkdirAll("/etc/containerd", 0o755))
	must(t, os.WriteFile("/etc/containerd/config.toml", []byte(kindConfig), 0o644))
	// kind makes the base spec of its runc runtimes with `ctr oci spec`.
	must(t, os.WriteFile("/etc/containerd/cri-base.json", []byte(sh(t, filepath.Join(bin, "ctr"), "oci", "spec")), 0o644))
	cniSetup(t)
	must(t, os.WriteFile("/etc/systemd/system/containerd.service", []byte(fmt.Sprintf(`[Unit]
Description=containerd (vmpod node test, kind's config)
[Service]
ExecStart=%[1]s/containerd
Environment=PATH=%[1]s:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
Type=notify
Delegate=yes
KillMode=process
`, bin)), 0o644))
	sh(t, "systemctl", "daemon-reload")
	sh(t, "systemctl", "start", "containerd")
	t.Cleanup(func() { _ = exec.Command("systemctl", "stop", "containerd").Run() })
	c := crictlAt(t, bin, "unix:///run/containerd/containerd.sock")
	crictl, mustCrictl := c.run, c.must
	waitFor(t, "containerd's CRI", time.Minute, func() bool { _, err := crictl("info"); return err == nil })

	// The installer, as the DaemonSet runs it: its command and environment
	// from manifests/installer, the host's / at the host mount, the image's
	// vm-runtime at /usr/local/bin, the ConfigMap's script at its mount.
	// containerd runs from the repo, which the node sees read-only: the
	// shim's link goes to /usr/local/bin, on containerd's PATH.
	// It starts the node daemon (the unit vm-runtime-daemon) before it
	// restarts containerd. Should the test stop before its uninstall, the
	// daemon goes too: the next subtests count vm-runtime processes.
	t.Cleanup(func() {
		if _, err := os.Stat(daemonUnitFile); err == nil {
			_ = exec.Command("systemctl", "disable", "--now", daemonUnit).Run()
			os.Remove(daemonUnitFile)
			_ = exec.Command("systemctl", "daemon-reload").Run()
		}
	})
	installer := startInstaller(t, repo, "CONTAINERD_BIN_DIR=/usr/local/bin")
	waitFor(t, "the installer to add the vmpod runtime and restart containerd", 2*time.Minute, func() bool {
		out, err := crictl("info")
		return err == nil && strings.Contains(out, `"vmpod"`) && strings.Contains(readFile(t, "/etc/containerd/config.toml"), "io.containerd.vmpod.v2")
	})
	if st := unitState(daemonUnit); st != "active" {
		journal, _ := exec.Command("journalctl", "-u", daemonUnit, "--no-pager", "-n", "30").CombinedOutput()
		t.Fatalf("systemctl is-active %s after install: %s, want active\n%s", daemonUnit, st, journal)
	}
	if fi, err := os.Stat(daemonSocket); err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Errorf("no node daemon socket %s after install: %v", daemonSocket, err)
	}
	if out, err := exec.Command("systemctl", "is-enabled", daemonUnit).Output(); strings.TrimSpace(string(out)) != "enabled" {
		t.Errorf("systemctl is-enabled %s after install: %q, %v", daemonUnit, out, err)
	}
	fact("systemd: containerd from kind's config, vmpod installed by the DaemonSet's script in %.1fs; %s active", time.Since(start).Seconds(), daemonUnit)

	ctr := func(args ...string) string {
		return sh(t, append([]string{filepath.Join(bin, "ctr"), "-n", "k8s.io"}, args...)...)
	}
	ctr("images", "import", os.Getenv("VMPOD_PAUSE_ARCHIVE"))
	ctr("images", "tag", "--force", "localhost/vmpod/pause:v1", sandboxImage(t, kindConfig))
	ctr("images", "import", testguest.Archive(t))

	// The pod slice, made with the pod's memory limit as the kubelet's
	// systemd driver makes it (guest + overhead + room for the shim).
	const uid = "7e570000cafe"
	slice := "kubepods-besteffort-pod" + uid + ".slice"
	podLimit := vmLimit() + 64<<20
	startSlice(t, slice, podLimit)
	podID, id := c.runGuest(t.TempDir(), uid, slice, testguest.Image, fact, "systemd", "--runtime", "vmpod")

	qemu := atoi(t, mustCrictl("inspect", "-o", "go-template", "--template", "{{.info.pid}}", id))
	sliceDir := "/kubepods.slice/kubepods-besteffort.slice/" + slice
	wantCg := sliceDir + "/cri-containerd-" + id + ".scope"
	if got := cgroupOf(t, qemu); got != wantCg {
		t.Errorf("QEMU %d is in %s, want %s", qemu, got, wantCg)
	}
	gotMax := readFile(t, filepath.Join("/sys/fs/cgroup", wantCg, "memory.max"))
	if strings.TrimSpace(gotMax) != strconv.FormatUint(vmLimit(), 10) {
		t.Errorf("QEMU's memory.max = %s, want guest + overhead = %d", gotMax, vmLimit())
	}
	fact("systemd: QEMU's cgroup %s, memory.max %s (guest %d MiB + overhead %d MiB); the pod slice's memory.max %s",
		wantCg, strings.TrimSpace(gotMax), guestBytes>>20, (vmLimit()-guestBytes)>>20,
		strings.TrimSpace(readFile(t, filepath.Join("/sys/fs/cgroup", sliceDir, "memory.max"))))
	shimCg := cgroupOf(t, atoi(t, mustCrictl("inspectp", "-o", "go-template", "--template", "{{.info.pid}}", podID)))
	if want := sliceDir + "/cri-containerd-" + podID + ".scope"; shimCg != want {
		t.Errorf("the pod's shim is in %s, want %s", shimCg, want)
	}

	// The guest is still booting its kernel (nested TCG): it does not see
	// the ACPI button, so stop ends in a hard stop after the grace time.
	mustCrictl("stop", "--timeout", "3", id)
	code := mustCrictl("inspect", "-o", "go-template", "--template", "{{.status.exitCode}}", id)
	if code != "137" {
		t.Errorf("exit code after stop = %s, want 137 (killed after the grace time)", code)
	}
	fact("systemd: crictl stop -> exit code %s", code)
	mustCrictl("rm", id)
	mustCrictl("stopp", podID)
	mustCrictl("rmp", podID)

	waitFor(t, "the pod's processes and scopes to go", 30*time.Second, func() bool {
		return len(podProcs(t)) == 0 &&
			strings.TrimSpace(sh(t, "systemctl", "list-units", "--all", "--plain", "--no-legend", "cri-containerd-*")) == ""
	})
	if sub := subdirs(filepath.Join("/sys/fs/cgroup", sliceDir)); len(sub) > 0 {
		t.Errorf("cgroups left under the pod slice: %v", sub)
	}
	if left, _ := os.ReadDir("/var/lib/vmpod/pods"); len(left) > 0 {
		t.Errorf("pod state left in /var/lib/vmpod/pods: %v", left)
	}
	stopSlice(t, slice)
	fact("systemd: after rm: no QEMU, shim, scope, cgroup or pod state left")

	// The DaemonSet's pod stops (as for a rollout): vmpod stays.
	must(t, installer.Process.Signal(syscall.SIGTERM))
	if err := waitExit(installer, time.Minute); err != nil {
		t.Errorf("the installer did not stop cleanly: %v", err)
	}
	if got := readFile(t, "/etc/containerd/config.toml"); !strings.Contains(got, "io.containerd.vmpod.v2") {
		t.Errorf("the installer's pod stopping took vmpod out of containerd's config:\n%s", got)
	}
	if st := unitState(daemonUnit); st != "active" {
		t.Errorf("the installer's pod stopping left %s %s, want active", daemonUnit, st)
	}
	// The documented uninstall: the DaemonSet's pod with
	// VMPOD_RUN_MODE=uninstall takes vmpod out again.
	uninstaller := startInstaller(t, repo, "VMPOD_RUN_MODE=uninstall", "CONTAINERD_BIN_DIR=/usr/local/bin")
	waitFor(t, "the installer to take vmpod out of containerd's config", 2*time.Minute, func() bool {
		return readFile(t, "/etc/containerd/config.toml") == kindConfig
	})
	// It stops and disables the daemon and removes its unit after
	// containerd's config (its log says "uninstalled" last).
	waitFor(t, "the installer to remove "+daemonUnitFile, time.Minute, func() bool {
		_, err := os.Stat(daemonUnitFile)
		return os.IsNotExist(err)
	})
	if st := unitState(daemonUnit); st == "active" || st == "activating" {
		t.Errorf("systemctl is-active %s after uninstall: %s", daemonUnit, st)
	}
	if _, err := os.Lstat("/etc/systemd/system/multi-user.target.wants/" + daemonUnit + ".service"); !os.IsNotExist(err) {
		t.Errorf("uninstall left %s enabled (err %v)", daemonUnit, err)
	}
	must(t, uninstaller.Process.Signal(syscall.SIGTERM))
	if err := waitExit(uninstaller, time.Minute); err != nil {
		t.Errorf("the uninstalling installer did not stop cleanly: %v", err)
	}
	if left := procs("vm-runtime"); len(left) > 0 {
		t.Errorf("vm-runtime processes after uninstall: %v", left)
	}
	fact("systemd: whole run %.1fs", time.Since(start).Seconds())
}

// cgroupfsNode: the same VM pod with the cgroupfs driver on cgroup v2,
// through the containerd test harness.
func cgroupfsNode(t *testing.T, fact func(string, ...any)) {
	start := time.Now()
	shimDir := t.TempDir()
	must(t, os.Symlink(filepath.Join(nodevm.ShareDir, "vm-runtime"), filepath.Join(shimDir, "containerd-shim-vmpod-v2")))
	// Short: QEMU's sockets go a few levels below it (108-byte limit).
	state, err := os.MkdirTemp("/tmp", "vst-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(state) })
	c := containerd.Start(t, containerd.Options{
		ShimDir:  shimDir,
		VMDaemon: &containerd.VMDaemon{Bin: filepath.Join(nodevm.ShareDir, "vm-runtime"), StateRoot: state},
	})
	c.ImportImage(t, testguest.Archive(t))
	pod := c.NewPodConfig("guest", "default", "7e57-0002", nil)
	podDir := pod.Linux.CgroupParent
	// As the kubelet does on cgroup v2: the pod's cgroup, with the memory
	// and cpu controllers enabled from the root down.
	must(t, os.MkdirAll(filepath.Join("/sys/fs/cgroup", podDir), 0o755))
	var ancestors []string
	for d := filepath.Dir(podDir); d != "/"; d = filepath.Dir(d) {
		ancestors = append([]string{d}, ancestors...)
	}
	for _, d := range append([]string{"/"}, ancestors...) {
		must(t, os.WriteFile(filepath.Join("/sys/fs/cgroup", d, "cgroup.subtree_control"), []byte("+memory +cpu"), 0o644))
	}
	must(t, os.WriteFile(filepath.Join("/sys/fs/cgroup", podDir, "memory.max"), []byte(strconv.FormatUint(vmLimit()+64<<20, 10)), 0o644))
	podID := c.RunPod(t, pod, "vmpod")
	ctr := containerd.NewContainerConfig("vm", testguest.Image)
	ctr.Linux.Resources = containerd.Resources(1000, guestBytes)
	id := c.CreateContainer(t, podID, ctr, pod)
	started := time.Now()
	c.MustCrictl(t, "start", id)
	waitFor(t, "the guest's first serial line in crictl logs", 4*time.Minute, func() bool {
		out, _ := c.Crictl(t, "logs", id)
		return strings.Contains(out, firstLine)
	})
	fact("cgroupfs: crictl start -> first serial line (nested TCG): %.1fs", time.Since(started).Seconds())
	qemu := atoi(t, c.MustCrictl(t, "inspect", "-o", "go-template", "--template", "{{.info.pid}}", id))
	wantCg := podDir + "/" + id
	if got := cgroupOf(t, qemu); got != wantCg {
		t.Errorf("QEMU %d is in %s, want %s", qemu, got, wantCg)
	}
	gotMax := strings.TrimSpace(readFile(t, filepath.Join("/sys/fs/cgroup", wantCg, "memory.max")))
	if gotMax != strconv.FormatUint(vmLimit(), 10) {
		t.Errorf("QEMU's memory.max = %s, want %d", gotMax, vmLimit())
	}
	fact("cgroupfs: QEMU's cgroup %s, memory.max %s", wantCg, gotMax)
	c.MustCrictl(t, "stop", "--timeout", "3", id)
	if code := strings.TrimSpace(c.MustCrictl(t, "inspect", "-o", "go-template", "--template", "{{.status.exitCode}}", id)); code != "137" {
		t.Errorf("exit code after stop = %s, want 137", code)
	}
	c.MustCrictl(t, "rm", id)
	c.StopRemovePod(t, podID)
	// The harness's node daemon (vm-runtime too) runs on: not the pod's.
	daemon := strconv.Itoa(c.DaemonPID())
	waitFor(t, "QEMU and the shim to go", 30*time.Second, func() bool {
		return len(slices.DeleteFunc(procs("qemu-system-x86", "vm-runtime"), func(p string) bool {
			pid, _, _ := strings.Cut(p, ":")
			return pid == daemon
		})) == 0
	})
	if sub := subdirs(filepath.Join("/sys/fs/cgroup", podDir)); len(sub) > 0 {
		t.Errorf("cgroups left under the pod's: %v", sub)
	}
	if left, _ := os.ReadDir(filepath.Join(state, "pods")); len(left) > 0 {
		t.Errorf("pod state left: %v", left)
	}
	must(t, os.Remove(filepath.Join("/sys/fs/cgroup", podDir)))
	fact("cgroupfs: whole run %.1fs, nothing left", time.Since(start).Seconds())
}

// startInstaller runs manifests/installer's container as the DaemonSet
// would: its command, its environment, / at its host mount, in a mount
// namespace of its own; env is added to the DaemonSet's environment.
func startInstaller(t *testing.T, repo string, env ...string) *exec.Cmd {
	t.Helper()
	var ds appsv1.DaemonSet
	must(t, yaml.Unmarshal([]byte(readFile(t, filepath.Join(repo, "manifests", "installer", "installer.yaml"))), &ds))
	c := ds.Spec.Template.Spec.Containers[0]
	if !ds.Spec.Template.Spec.HostPID {
		t.Fatal("the installer DaemonSet lost hostPID, which its nsenter into the host needs")
	}
	hostMount, scriptMount := "", ""
	for _, m := range c.VolumeMounts {
		switch m.Name {
		case "host":
			hostMount = m.MountPath
		case "script":
			scriptMount = m.MountPath
		}
	}
	if hostMount == "" || scriptMount == "" {
		t.Fatalf("the installer's mounts changed: %+v", c.VolumeMounts)
	}
	// The image's binaries and the ConfigMap's files (the script and the
	// node daemon's unit beside it), where the container has them.
	copyFile(t, filepath.Join(nodevm.ShareDir, "vm-runtime"), "/usr/local/bin/vm-runtime", 0o755)
	copyFile(t, filepath.Join(nodevm.ShareDir, "vmpod-qemu"), "/usr/local/bin/vmpod-qemu", 0o755)
	must(t, os.MkdirAll(scriptMount, 0o755))
	for _, f := range installerConfigMapFiles(t, repo) {
		copyFile(t, filepath.Join(repo, "manifests", f), filepath.Join(scriptMount, filepath.Base(f)), 0o644)
	}
	must(t, os.MkdirAll(hostMount, 0o755))

	cmdline := strings.Join(quoteAll(append(c.Command, c.Args...)), " ")
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
		fmt.Sprintf("mount --rbind / %s && exec %s", hostMount, cmdline))
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	for _, e := range c.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	cmd.Env = append(cmd.Env, env...) // the last of a name counts
	log, err := os.OpenFile(filepath.Join(nodevm.ShareDir, "installer.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	must(t, err)
	cmd.Stdout, cmd.Stderr = log, log
	must(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		log.Close()
		if t.Failed() {
			t.Logf("installer log:\n%s", readFile(t, log.Name()))
		}
	})
	return cmd
}

// installerConfigMapFiles are the files manifests/kustomization.yaml puts
// into the installer's ConfigMap, relative to manifests/.
func installerConfigMapFiles(t *testing.T, repo string) []string {
	t.Helper()
	var k struct {
		ConfigMapGenerator []struct {
			Name  string   `json:"name"`
			Files []string `json:"files"`
		} `json:"configMapGenerator"`
	}
	must(t, yaml.Unmarshal([]byte(readFile(t, filepath.Join(repo, "manifests", "kustomization.yaml"))), &k))
	for _, g := range k.ConfigMapGenerator {
		if g.Name == "vmpod-installer" {
			return g.Files
		}
	}
	t.Fatal("manifests/kustomization.yaml makes no vmpod-installer ConfigMap")
	return nil
}

// The node daemon's unit, as the installer installs it.
const (
	daemonUnit     = "vm-runtime-daemon"
	daemonUnitFile = "/etc/systemd/system/vm-runtime-daemon.service"
	daemonSocket   = "/run/vmpod/vmd.sock"
)

// unitState is `systemctl is-active UNIT`: active, inactive, failed...
func unitState(unit string) string {
	out, _ := exec.Command("systemctl", "is-active", unit).Output() // non-zero unless active
	return strings.TrimSpace(string(out))
}

// podProcs are the QEMUs and vm-runtime processes of the node's pods: not
// the node daemon, which outlives them.
func podProcs(t *testing.T) []string {
	t.Helper()
	daemon := "-"
	if out, err := exec.Command("systemctl", "show", "--property", "MainPID", "--value", daemonUnit).Output(); err == nil {
		daemon = strings.TrimSpace(string(out))
	}
	return slices.DeleteFunc(procs("qemu-system-x86", "vm-runtime"), func(p string) bool {
		pid, _, _ := strings.Cut(p, ":")
		return pid == daemon
	})
}

// startSlice makes the pod's slice over D-Bus with a memory limit, as the
// kubelet's systemd cgroup driver does.
func startSlice(t *testing.T, slice string, memMax uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := systemd.NewWithContext(ctx)
	must(t, err)
	defer conn.Close()
	done := make(chan string, 1)
	props := []systemd.Property{
		systemd.PropDescription("vmpod test pod " + slice),
		{Name: "MemoryAccounting", Value: godbus.MakeVariant(true)},
		{Name: "MemoryMax", Value: godbus.MakeVariant(memMax)},
	}
	if _, err := conn.StartTransientUnitContext(ctx, slice, "fail", props, done); err != nil {
		t.Fatalf("make %s: %v", slice, err)
	}
	if r := <-done; r != "done" {
		t.Fatalf("make %s: job %s", slice, r)
	}
	t.Cleanup(func() { stopSlice(t, slice) })
}

func stopSlice(t *testing.T, slice string) {
	_ = exec.Command("systemctl", "stop", slice).Run()
}

// sandboxImage is the pinned sandbox image of kind's config.
func sandboxImage(t *testing.T, config string) string {
	for _, line := range strings.Split(config, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "sandbox_image = "); ok {
			return strings.Trim(v, `"`)
		}
	}
	t.Fatal("kind's containerd config pins no sandbox_image")
	return ""
}

// cniSetup gives containerd's default CNI dirs a bridge network whose
// addresses exist only inside this VM (it has no NIC).
func cniSetup(t *testing.T) {
	must(t, os.MkdirAll("/opt/cni/bin", 0o755))
	plugins, err := filepath.Glob("/usr/lib/cni/*")
	must(t, err)
	for _, p := range plugins {
		must(t, os.Symlink(p, filepath.Join("/opt/cni/bin", filepath.Base(p))))
	}
	must(t, os.MkdirAll("/etc/cni/net.d", 0o755))
	must(t, os.WriteFile("/etc/cni/net.d/10-vmpod.conflist", []byte(`{
  "cniVersion": "1.0.0", "name": "nodevm",
  "plugins": [{"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.0.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}}]
}`), 0o644))
}

// cgroupOf is pid's cgroup v2 path.
func cgroupOf(t *testing.T, pid int) string {
	t.Helper()
	s := readFile(t, fmt.Sprintf("/proc/%d/cgroup", pid))
	return strings.TrimSpace(strings.TrimPrefix(s, "0::"))
}

// procs lists live processes whose comm starts with one of the names.
func procs(names ...string) []string {
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		comm := strings.TrimSpace(string(b))
		for _, n := range names {
			if strings.HasPrefix(comm, n) {
				out = append(out, filepath.Base(filepath.Dir(f))+":"+comm)
			}
		}
	}
	return out
}

func subdirs(dir string) []string {
	var out []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

func waitFor(t *testing.T, what string, timeout time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for next := time.Now().Add(15 * time.Second); !ok(); {
		if time.Now().After(deadline) {
			t.Fatalf("no %s in %s", what, timeout)
		}
		if time.Now().After(next) {
			t.Logf("still waiting for %s", what)
			next = time.Now().Add(15 * time.Second)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func waitExit(cmd *exec.Cmd, timeout time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		return fmt.Errorf("still running after %s", timeout)
	}
}

func sh(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func writeJSON(t *testing.T, dir, name string, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	must(t, err)
	p := filepath.Join(dir, name)
	must(t, os.WriteFile(p, b, 0o644))
	return p
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	must(t, err)
	return string(b)
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	must(t, os.WriteFile(to, []byte(readFile(t, from)), mode))
	must(t, os.Chmod(to, mode))
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(s))
	must(t, err)
	return n
}

func quoteAll(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// crictl drives a CRI endpoint with the repo's crictl.
type crictl struct {
	t    *testing.T
	argv []string
}

// crictlAt is crictl in bin against the runtime endpoint, with more
// global flags if given.
func crictlAt(t *testing.T, bin, endpoint string, flags ...string) crictl {
	argv := append([]string{filepath.Join(bin, "crictl"), "--runtime-endpoint", endpoint, "--timeout", "2m"}, flags...)
	return crictl{t: t, argv: argv}
}

// run is crictl's stdout, trimmed; with its stderr too when it fails
// (its warnings are not part of the answer).
func (c crictl) run(args ...string) (string, error) {
	cmd := exec.Command(c.argv[0], append(c.argv[1:len(c.argv):len(c.argv)], args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return strings.TrimSpace(string(out) + stderr.String()), err
	}
	return strings.TrimSpace(string(out)), nil
}

func (c crictl) must(args ...string) string {
	c.t.Helper()
	out, err := c.run(args...)
	if err != nil {
		c.t.Fatalf("crictl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// runGuest runs the test guest's pod (uid) under the systemd pod slice
// with image, its configs in dir, and waits for the guest kernel's first
// serial line; runp are runp's extra flags. It returns the pod's and the
// VM container's ids.
func (c crictl) runGuest(dir, uid, slice, image string, fact func(string, ...any), label string, runp ...string) (podID, id string) {
	t := c.t
	t.Helper()
	podJSON := writeJSON(t, dir, "pod.json", &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "guest", Namespace: "default", Uid: uid},
		LogDirectory: filepath.Join(dir, "logs"),
		Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: slice},
	})
	ctrJSON := writeJSON(t, dir, "vm.json", &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "vm"},
		Image:    &runtimeapi.ImageSpec{Image: image},
		LogPath:  "vm.log",
		Linux:    &runtimeapi.LinuxContainerConfig{Resources: containerd.Resources(1000, guestBytes)},
	})
	podID = c.must(append(append([]string{"runp"}, runp...), podJSON)...)
	id = c.must("create", podID, ctrJSON, podJSON)
	started := time.Now()
	c.must("start", id)
	waitFor(t, "the guest's first serial line in crictl logs", 4*time.Minute, func() bool {
		out, _ := c.run("logs", id)
		return strings.Contains(out, firstLine)
	})
	fact("%s: crictl start -> first serial line (nested TCG): %.1fs", label, time.Since(started).Seconds())
	return podID, id
}
