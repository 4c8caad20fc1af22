package containerd_test

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vmpod/vmpod/internal/ociarchive"
	"github.com/vmpod/vmpod/internal/testenv/containerd"
)

// hostSide is what a hostile image aims at: files and a block device on
// the node, outside every image.
type hostSide struct {
	dir    string // holds marker, data.raw, disk.raw, vmlinux, initrd.img
	marker string // a host file, as in "/etc/shadow"
	loop   string // a loop device over a file in dir; "" when none could be made
}

// layerEntry is one entry of a hostile image's only layer.
type layerEntry struct {
	name string // in the image, no leading slash
	typ  byte   // tar.TypeDir, tar.TypeReg or tar.TypeSymlink
	src  string // TypeReg: the file whose bytes it holds
	link string // TypeSymlink: the target, verbatim
}

func imgDir(name string) layerEntry { return layerEntry{name: name, typ: tar.TypeDir} }
func imgFile(name, src string) layerEntry {
	return layerEntry{name: name, typ: tar.TypeReg, src: src}
}
func imgSymlink(name, target string) layerEntry {
	return layerEntry{name: name, typ: tar.TypeSymlink, link: target}
}

// diskImage is a containerdisk holding one disk file.
func diskImage(file, src string) []layerEntry {
	return []layerEntry{imgDir("disk"), imgFile("disk/"+file, src)}
}

func (h hostSide) dataFile() string { return filepath.Join(h.dir, "data.raw") }

// hostileCase is a containerdisk built to reach the host and the refusal
// the shim must give it (pkg/vm image.go and overlay.go word them). want
// "" marks an image that is not hostile after all and must run.
type hostileCase struct {
	name  string
	image func(t *testing.T, h hostSide, scratch string) []layerEntry
	want  string // {marker}, {loop} and {datafile} stand for hostSide's paths
}

// commaDisk is a disk name that, pasted into a QEMU or qemu-img option
// string, would add options to it. It has no "/" (a file name cannot), so
// it cannot name a host path itself; what the test checks is that it
// reaches the VM whole, as one file name.
const commaDisk = "a,backing_file=marker,backing_fmt=raw,b.raw"

func hostileCases() []hostileCase {
	return []hostileCase{
		{"backing file is a host file", func(t *testing.T, h hostSide, s string) []layerEntry {
			return diskImage("disk.qcow2", qcow2(t, s, "-u", "-F", "raw", "-b", h.marker))
		}, `image file /disk/disk.qcow2: has a backing file ("{marker}")`},
		{"backing file is a host block device", func(t *testing.T, h hostSide, s string) []layerEntry {
			return diskImage("disk.qcow2", qcow2(t, s, "-u", "-F", "raw", "-b", h.loop))
		}, `image file /disk/disk.qcow2: has a backing file ("{loop}")`},
		{"external data file on the host", func(t *testing.T, h hostSide, s string) []layerEntry {
			// qemu-img create would create (truncate) the data file: it gets
			// one of its own here, and amend then points the header at the
			// host's, which amend does not open.
			p := qcow2(t, s, "-o", "data_file="+filepath.Join(s, "own.raw")+",data_file_raw=on")
			qemuImg(t, "amend", "-o", "data_file="+h.dataFile(), p)
			return diskImage("disk.qcow2", p)
		}, `image file /disk/disk.qcow2: has an external data file ("{datafile}")`},
		{"/disk an absolute symlink to a host directory with a disk", func(t *testing.T, h hostSide, s string) []layerEntry {
			return []layerEntry{imgSymlink("disk", h.dir)}
		}, `image file /disk: a symlink is on its path`},
		{"/boot a ../.. symlink to a host directory with a kernel", func(t *testing.T, h hostSide, s string) []layerEntry {
			// Enough ".." to reach / from wherever the snapshotter
			// unpacks the image, then the host dir.
			up := strings.Repeat("../", 32)
			return []layerEntry{imgSymlink("boot", up+strings.TrimPrefix(h.dir, "/"))}
		}, `image file /boot/vmlinux: a symlink is on its path`},
		{"comma in the name of a disk backed by a host file", func(t *testing.T, h hostSide, s string) []layerEntry {
			return diskImage("a,file.driver=raw,b.qcow2", qcow2(t, s, "-u", "-F", "raw", "-b", h.marker))
		}, `image file /disk/a,file.driver=raw,b.qcow2: has a backing file ("{marker}")`},
		{"comma in the name of a clean raw disk", func(t *testing.T, h hostSide, s string) []layerEntry {
			return diskImage(commaDisk, raw(t, s))
		}, ""},
		{"raw content named .qcow2", func(t *testing.T, h hostSide, s string) []layerEntry {
			return diskImage("disk.qcow2", raw(t, s))
		}, `image file /disk/disk.qcow2: named .qcow2 but not qcow2`},
		{"qcow2 content named .raw", func(t *testing.T, h hostSide, s string) []layerEntry {
			return diskImage("disk.raw", qcow2(t, s))
		}, `image file /disk/disk.raw: qcow2 content under a raw disk's name`},
		{"virtual size above vm.MaxDiskBytes", func(t *testing.T, h hostSide, s string) []layerEntry {
			return diskImage("disk.qcow2", qcow2(t, s, "-o", "cluster_size=2M", "--", "64T"))
		}, `image file /disk/disk.qcow2: virtual size 65536 GiB is above the maximum of 4096 GiB`},
	}
}

// TestCrictlRefusesHostileImages runs a pod per hostile containerdisk
// (built here as a real OCI image and imported) through containerd's CRI
// with crictl: runp, create, start. Start must fail with the shim's
// refusal naming the file and the problem, while inotify on the host
// files the image points at sees no open or read and no QEMU runs for the
// pod; the failed start must leave no tap in the pod's netns, no domain
// and no VM files in the pod's state dir, no rootfs mount; and after rm
// and rmp nothing of the pod is left on the node. A disk whose name holds
// commas is not hostile by itself: it runs, and QEMU has that file open
// under its whole name.
func TestCrictlRefusesHostileImages(t *testing.T) {
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Fatalf("qemu-img: %v", err)
	}
	state, err := os.MkdirTemp("/tmp", "vmpod-st-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	h := newHostSide(t)
	c := containerd.Start(t, containerd.Options{
		ShimDir:    shimDir(t),
		VMDaemon:   &containerd.VMDaemon{StateRoot: state},
		CRITimeout: time.Minute,
	})

	watched := []string{h.dir}
	if h.loop != "" {
		watched = append(watched, h.loop)
	}
	for i, hc := range hostileCases() {
		t.Run(hc.name, func(t *testing.T) {
			// The image is built and imported before the host files are
			// watched: nothing from here on has a reason to open them.
			scratch := t.TempDir()
			ref := fmt.Sprintf("localhost/vmpod/hostile-%d:v1", i)
			archive := filepath.Join(scratch, "image.oci.tar")
			writeContainerdisk(t, archive, ref, hc.image(t, h, scratch))
			c.ImportImage(t, archive)
			t.Cleanup(func() {
				if _, err := c.Crictl(t, "rmi", ref); err != nil {
					t.Errorf("crictl rmi %s: %v", ref, err)
				}
			})
			want := strings.NewReplacer("{marker}", h.marker, "{loop}", h.loop, "{datafile}", h.dataFile()).Replace(hc.want)
			opened := watchHostFiles(t, watched...)
			// The watch sees an open and a read, so its silence later
			// means something.
			if b, err := os.ReadFile(h.marker); err != nil || len(b) == 0 {
				t.Fatalf("read %s: %v", h.marker, err)
			}
			if got := opened(); len(got) < 2 {
				t.Fatalf("inotify saw %v when the test read %s", got, h.marker)
			}
			runHostile(t, c, state, h, i, ref, want, opened)
		})
	}
}

// runHostile runs one pod with image ref and checks it as
// TestCrictlRefusesHostileImages says; want "" expects the VM to run.
func runHostile(t *testing.T, c *containerd.Containerd, state string, h hostSide, i int, ref, want string, opened func() []string) {
	pod := c.NewPodConfig(fmt.Sprintf("hostile-%d", i), "default", fmt.Sprintf("7e57-0d15-%04d", i), nil)
	podID := c.RunPod(t, pod, "vmpod")
	ps := c.InspectPod(t, podID)
	podRemoved := false
	t.Cleanup(func() {
		if !podRemoved {
			c.Crictl(t, "stopp", podID)
			c.Crictl(t, "rmp", "-f", podID)
		}
	})
	// The shim's state dir for the pod (pkg/shim config.go podDir: the
	// sandbox ID's first 16 characters keep QEMU's socket paths short).
	podDir := filepath.Join(state, "pods", podID[:16])
	qemus := watchQEMU(t, podDir)
	shim := shimOf(t, podID)

	ctr := containerd.NewContainerConfig("vm", ref)
	ctr.Linux.Resources = containerd.Resources(1000, 256<<20)
	id := c.CreateContainer(t, podID, ctr, pod)
	_, startErr := c.Crictl(t, "start", id)

	if want == "" {
		// Accepted: QEMU runs with the disk open under its whole name.
		if startErr != nil {
			t.Fatalf("crictl start: %v", startErr)
		}
		pid := qemuPID(t, c, id)
		files := qemuOpenFiles(t, pid)
		var disk, overlay string
		for target, fd := range files {
			switch {
			case strings.HasSuffix(target, "/disk/"+commaDisk):
				disk = target
			case filepath.Base(target) == "disk.qcow2":
				overlay = fd
			}
			if strings.HasPrefix(target, h.dir+"/") || target == h.loop {
				t.Errorf("QEMU %d has the host's %s open", pid, target)
			}
		}
		if disk == "" {
			t.Errorf("QEMU %d has no file ending in /disk/%s open: %v", pid, commaDisk, files)
		}
		if overlay == "" {
			t.Errorf("QEMU %d has no overlay disk.qcow2 open: %v", pid, files)
		} else if b := overlayBacking(t, overlay); b != disk {
			t.Errorf("the overlay's backing file is %q, want the disk QEMU has open, %q", b, disk)
		} else {
			t.Logf("accepted: QEMU %d has %s open, the backing file of its overlay", pid, disk)
		}
		// What the refused pods are checked for is there when a VM runs,
		// so its absence there means something.
		if got := qemus(); len(got) == 0 {
			t.Errorf("the QEMU watch missed QEMU %d", pid)
		}
		if !podHasTap(t, c, ps) {
			t.Errorf("no tap in the pod's netns while the VM runs")
		}
		if hasTap(t, c) {
			t.Errorf("a tap in the node's netns while the VM runs: each moves into its pod's")
		}
		if len(shimMounts(t, shim, id)) == 0 {
			t.Errorf("no rootfs mount naming %s in the shim's mount table while the VM runs", id)
		}
		c.MustCrictl(t, "stop", "--timeout", "5", id)
	} else if startErr == nil {
		// Still see below whether the VM reached the host's files.
		t.Errorf("crictl start succeeded; want a refusal containing %q", want)
		c.MustCrictl(t, "stop", "--timeout", "5", id)
	} else {
		// crictl logs the gRPC error quoted, its quotes escaped.
		msg := strings.ReplaceAll(startErr.Error(), `\"`, `"`)
		if !strings.Contains(msg, "code = InvalidArgument") || !strings.Contains(msg, want) {
			t.Errorf("crictl start: %v\nwant InvalidArgument containing %q", startErr, want)
		} else {
			t.Logf("refused: %s", refusal(msg))
		}
		if got := qemus(); len(got) > 0 {
			t.Errorf("QEMU ran for the refused pod: %q", got)
		}
		// The failed start is undone while the pod lives on.
		assertNoVM(t, c, ps, shim, podDir, pod.Metadata.Namespace+"_"+pod.Metadata.Name, id)
	}
	if got := opened(); len(got) > 0 {
		t.Errorf("host files the image points at were opened or read: %v", got)
	}

	c.MustCrictl(t, "rm", id)
	c.StopRemovePod(t, podID)
	podRemoved = true
	assertPodGone(t, c, state, pod, ps, podDir, id)
}

// refusal is the shim's part of crictl's error line, from "image file " on.
func refusal(msg string) string {
	if i := strings.Index(msg, "image file "); i >= 0 {
		msg = msg[i:]
	}
	if i := strings.Index(msg, `" containerID=`); i >= 0 {
		msg = msg[:i]
	}
	return msg
}

// podHasTap reports whether the pod's netns holds a tap (the guest's,
// which the node daemon makes in the node's netns and moves there).
func podHasTap(t *testing.T, c *containerd.Containerd, ps containerd.PodStatus) bool {
	t.Helper()
	return hasTap(t, c, "--net="+ps.NetNSPath)
}

// hasTap reports whether the network namespace nsenter's flags name (the
// node's, with none) holds a tap.
func hasTap(t *testing.T, c *containerd.Containerd, flags ...string) bool {
	t.Helper()
	out, err := c.Run(10*time.Second, "nsenter", append(flags, "ip", "-o", "link", "show", "type", "tun")...)
	if err != nil {
		t.Fatalf("taps in the namespace: %v", err)
	}
	return strings.TrimSpace(out) != ""
}

// shimMounts lists the lines of the shim's mount table that name id (the
// shim mounts the container's rootfs in its bundle).
func shimMounts(t *testing.T, shim int, id string) []string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", shim))
	if err != nil {
		t.Fatalf("the shim's mounts: %v", err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, id) {
			out = append(out, line)
		}
	}
	return out
}

// assertNoVM checks a pod whose VM start failed: no tap in its netns, no
// domain, overlay or other VM file in its state dir, no mount of the
// container's rootfs in the shim's or containerd's mount table.
func assertNoVM(t *testing.T, c *containerd.Containerd, ps containerd.PodStatus, shim int, podDir, domain, ctrID string) {
	t.Helper()
	if podHasTap(t, c, ps) {
		t.Errorf("a tap left in the pod's netns after the failed start")
	}
	if hasTap(t, c) {
		t.Errorf("a tap left in the node's netns after the failed start")
	}
	if m := shimMounts(t, shim, ctrID); len(m) > 0 {
		t.Errorf("mounts left in the shim after the failed start: %q", m)
	}
	for _, pattern := range []string{"disk.qcow2", "cidata.iso", "nvram.fd", "*.sock"} { // the VM's files
		if m, _ := filepath.Glob(filepath.Join(podDir, pattern)); len(m) > 0 {
			t.Errorf("left in the pod's state dir after the failed start: %v", m)
		}
	}
	// The node daemon's: the VM's checkpoint, and a domain (libvirt names
	// it <namespace>_<pod>).
	state := filepath.Dir(filepath.Dir(podDir))
	for _, pattern := range []string{"vms/" + ctrID + ".json",
		"libvirt/etc/qemu/" + domain + ".xml", "libvirt/run/qemu/" + domain + ".*", "libvirt/log/qemu/" + domain + ".*"} {
		if m, _ := filepath.Glob(filepath.Join(state, pattern)); len(m) > 0 {
			t.Errorf("left in the node daemon's state after the failed start: %v", m)
		}
	}
	assertNoMounts(t, c, ctrID)
}

// assertPodGone checks that nothing of a removed pod is left: no QEMU or
// shim process, no netns, no mount, no cgroup, no shim state.
func assertPodGone(t *testing.T, c *containerd.Containerd, state string, pod *runtimeapi.PodSandboxConfig, ps containerd.PodStatus, podDir, ctrID string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var left []int
	for {
		left = procsNaming(ps.ID, ctrID, podDir+"/")
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Errorf("processes of the removed pod still run: %v", left)
	}
	if out, err := c.Run(10*time.Second, "ls", "-A", ps.NetNSPath); err == nil {
		t.Errorf("pod netns %s still there: %s", ps.NetNSPath, out)
	}
	assertNoMounts(t, c, ps.ID, ctrID, podDir)
	assertNoPodLeft(t, pod.Linux.CgroupParent, state)
}

// assertNoMounts fails on any mount in containerd's mount namespace whose
// line names one of ids.
func assertNoMounts(t *testing.T, c *containerd.Containerd, ids ...string) {
	t.Helper()
	mi, err := c.Run(10*time.Second, "cat", "/proc/self/mountinfo")
	if err != nil {
		t.Error(err)
		return
	}
	for _, line := range strings.Split(mi, "\n") {
		for _, id := range ids {
			if strings.Contains(line, id) {
				t.Errorf("mount left in containerd's mount namespace: %s", line)
			}
		}
	}
}

// procsNaming lists live processes whose command line names one of ids
// (the shim's -id, QEMU's paths under the pod's state dir).
func procsNaming(ids ...string) []int {
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || len(b) == 0 {
			continue
		}
		for _, id := range ids {
			if strings.Contains(string(b), id) {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
				if st, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "stat")); !isZombie(st) {
					pids = append(pids, pid)
				}
				break
			}
		}
	}
	return pids
}

func isZombie(stat []byte) bool {
	i := strings.LastIndexByte(string(stat), ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

// watchQEMU samples the process table every 20ms until the test ends or
// the returned function is called, which returns the command lines of the
// VM QEMUs that named podDir (libvirt puts a VM's secrets, logs and pid
// file under the pod's state dir). A VM QEMU has "-name guest=..."; the
// capability probes libvirt runs when the shim first opens it
// ("-machine none", no disk) are not VMs. Starting a VM takes QEMU far
// longer than 20ms.
func watchQEMU(t *testing.T, podDir string) func() []string {
	t.Helper()
	stop := make(chan struct{})
	done := make(chan struct{})
	var seen []string
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		found := map[string]bool{}
		for {
			procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
			for _, p := range procs {
				b, err := os.ReadFile(p)
				if err != nil || len(b) == 0 {
					continue
				}
				args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
				cmd := strings.Join(args, " ")
				if strings.HasPrefix(filepath.Base(args[0]), "qemu-system") && slices.Contains(args, "-name") &&
					strings.Contains(cmd, podDir+"/") && !found[cmd] {
					found[cmd] = true
					seen = append(seen, cmd)
				}
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	halt := func() []string {
		once.Do(func() { close(stop); <-done })
		return seen
	}
	t.Cleanup(func() { halt() })
	return halt
}

// watchHostFiles watches paths (a directory watches its entries) for
// opens and reads; the returned function reports what it saw since.
func watchHostFiles(t *testing.T, paths ...string) func() []string {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	wds := map[int32]string{}
	for _, p := range paths {
		wd, err := unix.InotifyAddWatch(fd, p, unix.IN_OPEN|unix.IN_ACCESS)
		if err != nil {
			t.Fatalf("inotify %s: %v", p, err)
		}
		wds[int32(wd)] = p
	}
	return func() []string {
		var got []string
		buf := make([]byte, 64*1024)
		for {
			n, err := unix.Read(fd, buf)
			if err != nil || n <= 0 {
				return got
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
				what := "open"
				if ev.Mask&unix.IN_ACCESS != 0 {
					what = "read"
				}
				got = append(got, what+" "+filepath.Join(wds[ev.Wd], name))
				off += unix.SizeofInotifyEvent + int(ev.Len)
			}
		}
	}
}

// newHostSide makes the host files hostile images point at, and a
// read-only loop device over one of them; all go away when the test ends.
func newHostSide(t *testing.T) hostSide {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "vmpod-host-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	h := hostSide{dir: dir, marker: filepath.Join(dir, "marker")}
	for name, data := range map[string]string{
		"marker":     "host secret\n",
		"vmlinux":    "not a kernel\n",
		"initrd.img": "not an initrd\n",
		"loop.img":   strings.Repeat("\x00", 1<<20),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"data.raw", "disk.raw"} {
		qemuImg(t, "create", "-q", "-f", "raw", filepath.Join(dir, name), "1M")
	}
	out, err := exec.Command("losetup", "--find", "--show", "--read-only", filepath.Join(dir, "loop.img")).CombinedOutput()
	if err != nil {
		t.Fatalf("a loop device for the host block device case: %v: %s", err, strings.TrimSpace(string(out)))
	}
	h.loop = strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "--detach", h.loop).CombinedOutput(); err != nil {
			t.Errorf("losetup --detach %s: %v: %s", h.loop, err, out)
		}
	})
	return h
}

// qcow2 makes a 1 MiB (or the size args end with) qcow2 in dir with
// qemu-img create args and returns its path.
func qcow2(t *testing.T, dir string, args ...string) string {
	t.Helper()
	p := filepath.Join(dir, "disk.qcow2")
	size := "1M"
	if n := len(args); n >= 2 && args[n-2] == "--" {
		size, args = args[n-1], args[:n-2]
	}
	qemuImg(t, append(append([]string{"create", "-q", "-f", "qcow2"}, args...), p, size)...)
	return p
}

func qemuImg(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("qemu-img", args...).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// raw makes a 1 MiB raw disk in dir and returns its path.
func raw(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "disk.raw")
	qemuImg(t, "create", "-q", "-f", "raw", p, "1M")
	return p
}

// qemuOpenFiles maps what QEMU pid has open (as /proc shows the path in
// its mount namespace) to the /proc/PID/fd/N that opens the same file from
// any namespace.
func qemuOpenFiles(t *testing.T, pid int) map[string]string {
	t.Helper()
	fds, err := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	if err != nil || len(fds) == 0 {
		t.Fatalf("QEMU %d's open files: %v", pid, err)
	}
	files := map[string]string{}
	for _, fd := range fds {
		if target, err := os.Readlink(fd); err == nil && strings.HasPrefix(target, "/") {
			files[target] = fd
		}
	}
	return files
}

// overlayBacking is the backing file a qcow2's header names. The backing
// file itself (in the image's rootfs mount, which only containerd's mount
// namespace has) is not opened.
func overlayBacking(t *testing.T, path string) string {
	t.Helper()
	spec, err := json.Marshal(map[string]any{"driver": "qcow2", "backing": nil, "file": map[string]any{"driver": "file", "filename": path}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("qemu-img", "info", "--output=json", "-U", "json:"+string(spec)).Output()
	if err != nil {
		t.Fatalf("qemu-img info %s: %v: %s", path, err, stderrOf(err))
	}
	var info struct {
		Backing string `json:"backing-filename"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatal(err)
	}
	return info.Backing
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return strings.TrimSpace(string(ee.Stderr))
	}
	return ""
}

// writeContainerdisk writes an OCI archive of a one-layer image named ref
// holding entries, as hack/guest/containerdisk does for good images, but
// with whatever entries a hostile author would put there.
func writeContainerdisk(t *testing.T, out, ref string, entries []layerEntry) {
	t.Helper()
	writeOCIImage(t, out, ref, func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(writeLayer(pw, entries)) }()
		return pr, nil
	})
}

// writeOCIImage writes an OCI archive of a one-layer image named ref
// whose layer is the tar stream layer opens (gzip'd here).
func writeOCIImage(t *testing.T, out, ref string, layer tarball.Opener) {
	t.Helper()
	l, err := tarball.LayerFromOpener(layer, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		t.Fatal(err)
	}
	epoch := time.Unix(0, 0).UTC()
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: l, MediaType: types.OCILayer})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	cfg.Created = v1.Time{Time: epoch}
	cfg.Config.Cmd = []string{"containerdisk"} // CRI wants a command; vmpod runs none
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		t.Fatal(err)
	}
	if err := ociarchive.Write(out, img, ref, epoch); err != nil {
		t.Fatal(err)
	}
}

func writeLayer(w io.Writer, entries []layerEntry) error {
	tw := tar.NewWriter(w)
	for _, e := range entries {
		hdr := &tar.Header{Typeflag: e.typ, Name: e.name, Mode: 0o755, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		switch e.typ {
		case tar.TypeDir:
			hdr.Name += "/"
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
		case tar.TypeSymlink:
			hdr.Linkname, hdr.Mode = e.link, 0o777
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
		case tar.TypeReg:
			f, err := os.Open(e.src)
			if err != nil {
				return err
			}
			st, err := f.Stat()
			if err == nil {
				hdr.Mode, hdr.Size = 0o444, st.Size()
				err = tw.WriteHeader(hdr)
			}
			if err == nil {
				_, err = io.Copy(tw, f)
			}
			f.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", e.src, err)
			}
		default:
			return fmt.Errorf("%s: unexpected type %c", e.name, e.typ)
		}
	}
	return tw.Close()
}
