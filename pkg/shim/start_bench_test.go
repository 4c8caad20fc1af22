package shim_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	taskAPI "github.com/containerd/containerd/api/runtime/task/v3"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"libvirt.org/go/libvirtxml"

	"github.com/vmpod/vmpod/internal/testguest"
	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/jail"
	"github.com/vmpod/vmpod/pkg/node"
	"github.com/vmpod/vmpod/pkg/node/embedded"
	"github.com/vmpod/vmpod/pkg/podcgroup"
	"github.com/vmpod/vmpod/pkg/virt"
	"github.com/vmpod/vmpod/pkg/virt/libvirt"
	"github.com/vmpod/vmpod/pkg/vm"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// initMarker is the test guest's /init's first line.
const initMarker = "VMPOD-GUEST: init"

// startRun is one start of the test guest, by one of the three ways the
// start benchmark compares: times from the request (vmpod: the VM task's
// Create; libvirt: Define; bare QEMU: exec) to the first serial line and
// to /init's first line, and vmpod's phases.
type startRun struct {
	firstLine, init time.Duration
	// cpus is QEMU's Cpus_allowed_list: the three must run alike.
	cpus string
	// qemuCPU is the CPU time QEMU had used when /init's line was read:
	// the work of the boot, against its wall time.
	qemuCPU time.Duration
	// vmpod only: the shim's start command for the pod, the Create call,
	// Start to the first serial line, and the phases the shim logged.
	shimExec, create, startToFirst time.Duration
	phases                         vm.Phases
	// libvirt only: Define, and Start (paused) to Resume's return.
	define, start time.Duration
}

// BenchmarkStartPhases starts the test guest b.N times (make bench: 5) in
// each of three ways, interleaved, and prints the medians as a table:
//
//   - vmpod: a pod through the shim binary as containerd drives it (the
//     shim's start command, sandbox Create/Start, VM Create/Start), its
//     console read from the task's stdout FIFO; the phases are the ones
//     the shim logs (vm.Phases);
//   - libvirt: the domain XML vmpod defined for the same spec, with the
//     files it names already made, defined and started by libvirt's
//     embedded driver in a process of its own, as the node daemon runs it
//     (paused, the console connected, resumed, so no output is lost), the
//     console read from its socket;
//   - bare QEMU: the same QEMU binary, kernel, initrd, command line,
//     overlay disk, machine, CPU, memory and agent channel started by
//     hand, unjailed, the console on its stdout.
//
// Both references run in a cgroup with the limits of the container's
// cgroup vmpod starts QEMU in: the same CPU and memory budget.
//
// The libvirt and bare QEMU runs have no NIC (this process is not in a
// pod's network namespace); vmpod's has the pod's. One boot per run is
// the unit; b.N runs of each.
func BenchmarkStartPhases(b *testing.B) {
	ref := newStartReference(b)
	var vmpod, lv, bare []startRun
	for b.Loop() {
		vmpod = append(vmpod, vmpodStart(b))
		lv = append(lv, ref.libvirtStart(b))
		bare = append(bare, ref.bareStart(b))
	}
	printStartTable(b, ref.domainType, vmpod, lv, bare)
}

// vmpodStart runs the test guest as a pod through the shim, to /init.
func vmpodStart(b *testing.B) startRun {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e := newPodEnv(b)
	// The node daemon logs the phases of each VM it starts, in one log
	// for the test binary: this run's line comes after its size now.
	d := daemon(b)
	logFrom := fileSize(d.log)
	c, qemuPID := e.runPod(b, ctx)
	e.stdout.waitFor(b, initMarker, 2*time.Minute)
	first, _, _ := e.stdout.when("")
	initAt, _, _ := e.stdout.when(initMarker)
	used := qemuCPU(int(qemuPID))
	line := waitLogLine(b, d.log, logFrom, "VM "+e.p.vmID+" started", 10*time.Second)
	phases, err := vm.ParsePhases(logField(line, "phases"))
	if err != nil {
		b.Fatalf("node daemon log %q: %v", line, err)
	}
	r := startRun{
		firstLine: first.Sub(e.createdAt), init: initAt.Sub(e.createdAt),
		shimExec: e.shimExec, create: e.startedAt.Sub(e.createdAt), startToFirst: first.Sub(e.startedAt),
		phases: phases, cpus: cpusAllowed(int(qemuPID)), qemuCPU: used,
	}
	if _, err := c.Kill(ctx, &taskAPI.KillRequest{ID: e.p.vmID, Signal: uint32(syscall.SIGKILL)}); err != nil {
		b.Fatal(err)
	}
	if _, err := c.Wait(ctx, &taskAPI.WaitRequest{ID: e.p.vmID}); err != nil {
		b.Fatal(err)
	}
	e.deletePod(b, ctx, c)
	waitGone(int(qemuPID), 10*time.Second)
	return r
}

// qemuCPU is the user and system CPU time process pid has used
// (/proc/<pid>/stat, in clock ticks of 10 ms); 0 if it cannot be read.
func qemuCPU(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command's closing parenthesis; utime and
	// stime are the 14th and 15th of the whole line.
	i := strings.LastIndexByte(string(data), ')')
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0
	}
	var utime, stime int64
	fmt.Sscan(f[11], &utime)
	fmt.Sscan(f[12], &stime)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// cpusAllowed is a process's Cpus_allowed_list.
func cpusAllowed(pid int) string {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// waitLogLine waits for the first line holding substr in the log at path
// past offset from.
func waitLogLine(b *testing.B, path string, from int64, substr string, timeout time.Duration) string {
	deadline := time.Now().Add(timeout)
	for {
		if data, err := os.ReadFile(path); err == nil && int64(len(data)) > from {
			for _, line := range strings.Split(string(data[from:]), "\n") {
				if strings.Contains(line, substr) {
					return line
				}
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("no %q in %s within %s", substr, path, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// logField is the value of key="..." in a logrus text line.
func logField(line, key string) string {
	_, rest, ok := strings.Cut(line, key+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// The libvirt reference runs in a process of its own (this test binary
// again, startRefEnv set: TestMain hands it to startRefMain), as the node
// daemon does: libvirt's event loop, which carries its QMP exchange with
// QEMU, then shares nothing with the benchmark's goroutines. The process
// answers one JSON request per line on stdin: "libvirt" (a timed start of
// vmpod's domain XML), "prepare" (every file the domain names, made
// through pkg/vm, and its XML, for bare QEMU) and "release".
const startRefEnv = "VMPOD_START_REFERENCE"

// startRefConfig is what the reference process is started with.
type startRefConfig struct {
	Root      string // a dir of its own (short: socket paths)
	Rootfs    string // the test guest's containerdisk, unpacked
	Jailer    string // the link to vmpod-qemu its domains name
	CapsCache string // the node daemon's capabilities cache
	VMRuntime string // vm-runtime, whose caps-probe fills it if cold
}

type startRefRequest struct {
	Op  string `json:"op"`
	Dir string `json:"dir,omitempty"`
}

type startRefReply struct {
	Err string `json:"err,omitempty"`
	// prepare
	Dir        string `json:"dir,omitempty"`
	XML        string `json:"xml,omitempty"`
	DomainType string `json:"domainType,omitempty"`
	// The limits of the container's cgroup vmpod starts QEMU in, which
	// both references get too: the same CPU and memory budget.
	Limits refLimits `json:"limits"`
	// libvirt
	FirstLine time.Duration `json:"firstLine,omitempty"`
	Init      time.Duration `json:"init,omitempty"`
	Define    time.Duration `json:"define,omitempty"`
	Start     time.Duration `json:"start,omitempty"`
	CPUs      string        `json:"cpus,omitempty"`
	QEMUCPU   time.Duration `json:"qemuCPU,omitempty"`
}

// refLimits are a cgroup's limits, as the reference process sends them.
type refLimits struct {
	MemoryBytes uint64 `json:"memoryBytes"`
	CPUQuota    int64  `json:"cpuQuota"`
	CPUPeriod   uint64 `json:"cpuPeriod"`
}

// enterBenchCgroup moves pid into a cgroup of its own with limits l, as
// vmpod's QEMU is in the container's; done removes it once pid is gone.
func enterBenchCgroup(pid int, name string, l refLimits) (done func() error, err error) {
	p, err := podcgroup.Parse(fmt.Sprintf("/vmpod-bench-%d/%s", os.Getpid(), name))
	if err != nil {
		return nil, err
	}
	if _, err := podcgroup.Enter(p, pid, podcgroup.Limits{MemoryBytes: l.MemoryBytes,
		CPU: &specs.LinuxCPU{Quota: &l.CPUQuota, Period: &l.CPUPeriod}}); err != nil {
		return nil, err
	}
	return func() error {
		parent, _ := podcgroup.Parse(fmt.Sprintf("/vmpod-bench-%d", os.Getpid()))
		return errors.Join(podcgroup.Remove(p), podcgroup.Remove(parent))
	}, nil
}

// startReference is the benchmark's end of the reference process.
type startReference struct {
	cmd *exec.Cmd
	enc *json.Encoder
	dec *json.Decoder
	// domainType is the domain's type in vmpod's XML: kvm, or qemu (TCG).
	domainType string
}

func newStartReference(b *testing.B) *startReference {
	root, err := os.MkdirTemp("/tmp", "vmpod-ref-") // short: socket paths
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(root) })
	// The jailer the node daemon links, built next to the shim, so the
	// reference's QEMU starts through the same program.
	cfg := startRefConfig{Root: root, Rootfs: testguest.Rootfs(b, root),
		Jailer:    filepath.Join(root, "jailer", jail.EmulatorName),
		CapsCache: filepath.Join(filepath.Dir(buildShim(b)), "caps"),
		VMRuntime: filepath.Join(filepath.Dir(buildShim(b)), "vm-runtime")}
	if err := os.MkdirAll(filepath.Dir(cfg.Jailer), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(filepath.Dir(buildShim(b)), jail.EmulatorName), cfg.Jailer); err != nil {
		b.Fatal(err)
	}
	conf, err := json.Marshal(cfg)
	if err != nil {
		b.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	r := &startReference{cmd: exec.Command(self)}
	r.cmd.Env = append(os.Environ(), startRefEnv+"="+string(conf))
	r.cmd.Stderr = os.Stderr
	in, err := r.cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := r.cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		in.Close() // it ends at EOF, its VMs gone
		if err := r.cmd.Wait(); err != nil {
			b.Errorf("the libvirt reference process: %v", err)
		}
	})
	r.enc, r.dec = json.NewEncoder(in), json.NewDecoder(out)
	return r
}

func (r *startReference) call(b *testing.B, req startRefRequest) startRefReply {
	if err := r.enc.Encode(req); err != nil {
		b.Fatalf("the libvirt reference process: %v", err)
	}
	var rep startRefReply
	if err := r.dec.Decode(&rep); err != nil {
		b.Fatalf("the libvirt reference process: %v", err)
	}
	if rep.Err != "" {
		b.Fatalf("the libvirt reference process, %s: %s", req.Op, rep.Err)
	}
	if rep.DomainType != "" {
		r.domainType = rep.DomainType
	}
	return rep
}

// libvirtStart defines and starts the XML vmpod made, to /init, in the
// reference process.
func (r *startReference) libvirtStart(b *testing.B) startRun {
	rep := r.call(b, startRefRequest{Op: "libvirt"})
	return startRun{firstLine: rep.FirstLine, init: rep.Init, cpus: rep.CPUs, qemuCPU: rep.QEMUCPU, define: rep.Define, start: rep.Start}
}

// bareStart starts QEMU by hand with what the domain XML names, to /init.
func (r *startReference) bareStart(b *testing.B) startRun {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep := r.call(b, startRefRequest{Op: "prepare"})
	defer r.call(b, startRefRequest{Op: "release", Dir: rep.Dir})
	l := vm.Layout{Dir: rep.Dir}
	emulator, args := bareArgs(b, rep.XML, l)

	began := time.Now()
	cmd := exec.CommandContext(ctx, emulator, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	leave, err := enterBenchCgroup(cmd.Process.Pid, "bare", rep.Limits)
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if leave != nil {
			if err := leave(); err != nil {
				b.Error(err)
			}
		}
	}()
	if err != nil {
		b.Fatal(err)
	}
	first, init, err := readUntil(out, began, initMarker)
	if err != nil {
		b.Fatalf("%v\nQEMU %v: %s", err, args, stderr.String())
	}
	return startRun{firstLine: first, init: init, cpus: cpusAllowed(cmd.Process.Pid), qemuCPU: qemuCPU(cmd.Process.Pid)}
}

// startRefMain is the reference process: libvirt's embedded driver on a
// root of its own, with the capabilities cache the node daemon uses.
func startRefMain() int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "libvirt reference: %v\n", err)
		return 1
	}
	var cfg startRefConfig
	if err := json.Unmarshal([]byte(os.Getenv(startRefEnv)), &cfg); err != nil {
		return fail(err)
	}
	ctx := context.Background()
	// As the node daemon opens it: a cold cache probed by vm-runtime
	// caps-probe, so this process loads it as vmpod trims it.
	o := node.Options{CapsCache: cfg.CapsCache, Pod: true, Jailer: cfg.Jailer, ProbeArgv: []string{cfg.VMRuntime, "caps-probe"}}
	conn, err := embedded.Open(ctx, filepath.Join(cfg.Root, "libvirt"), o)
	if err != nil {
		return fail(err)
	}
	defer conn.Close()
	h, err := node.HostOf(ctx, conn, o)
	if err != nil {
		return fail(err)
	}
	p := testPod{sandboxID: "ref", vmID: "ref", cgroupParent: "/ref"}
	spec, err := vmspec.FromOCI(vmSpec(p, "", "", nil), vmspec.MountRules{})
	if err != nil {
		return fail(err)
	}
	spec.NICs = nil
	ref := refProcess{cfg: cfg, conn: conn, rt: vm.NewRuntime(conn), host: h, spec: spec, prepared: map[string]func() error{}}
	defer ref.releaseAll()
	dec, enc := json.NewDecoder(os.Stdin), json.NewEncoder(os.Stdout)
	for {
		var req startRefRequest
		if err := dec.Decode(&req); err != nil {
			if errors.Is(err, io.EOF) {
				return 0
			}
			return fail(err)
		}
		rep, err := ref.serve(ctx, req)
		if err != nil {
			rep = startRefReply{Err: err.Error()}
		}
		if err := enc.Encode(rep); err != nil {
			return fail(err)
		}
	}
}

type refProcess struct {
	cfg      startRefConfig
	conn     *libvirt.Conn
	rt       *vm.Runtime
	host     host.Host
	spec     vmspec.Spec
	prepared map[string]func() error // by VM dir: its release
}

func (r *refProcess) serve(ctx context.Context, req startRefRequest) (startRefReply, error) {
	switch req.Op {
	case "prepare":
		l, xml, err := r.prepare(ctx)
		if err != nil {
			return startRefReply{}, err
		}
		return startRefReply{Dir: l.Dir, XML: xml, DomainType: domainType(xml), Limits: r.limits()}, nil
	case "release":
		return startRefReply{}, r.release(req.Dir)
	case "libvirt":
		return r.libvirtStart(ctx)
	}
	return startRefReply{}, fmt.Errorf("no op %q", req.Op)
}

// prepare makes, through pkg/vm, every file the domain names (overlay,
// jail, VM dir) and returns the domain XML vmpod defined for it, no
// longer defined; release removes it all.
func (r *refProcess) prepare(ctx context.Context) (vm.Layout, string, error) {
	dir, err := os.MkdirTemp(r.cfg.Root, "vm-")
	if err != nil {
		return vm.Layout{}, "", err
	}
	l := vm.Layout{Dir: dir}
	j, err := vm.LeaseJail(r.cfg.Root, jail.DefaultRange, l, 4<<30)
	if err != nil {
		os.RemoveAll(dir)
		return vm.Layout{}, "", err
	}
	j.LibvirtRoot = filepath.Join(r.cfg.Root, "libvirt")
	j.Jailer = r.cfg.Jailer
	var m *vm.Machine
	r.prepared[dir] = func() error {
		var errs []error
		if m != nil {
			errs = append(errs, m.Delete(context.Background()))
		}
		errs = append(errs, vm.ReleaseJail(r.cfg.Root, l), os.RemoveAll(dir))
		return errors.Join(errs...)
	}
	img, err := vm.InspectImage(r.cfg.Rootfs)
	if err != nil {
		return l, "", errors.Join(err, r.release(dir))
	}
	if m, err = r.rt.Create(ctx, vm.Config{Spec: r.spec, Host: r.host, Image: img, Layout: l, Jail: j}); err != nil {
		return l, "", errors.Join(err, r.release(dir))
	}
	data, err := os.ReadFile(filepath.Join(r.cfg.Root, "libvirt", "etc", "qemu", r.spec.Name+".xml"))
	if err != nil {
		return l, "", errors.Join(err, r.release(dir))
	}
	if err := r.conn.Undefine(ctx, r.spec.Name); err != nil {
		return l, "", errors.Join(err, r.release(dir))
	}
	return l, string(data), nil
}

// limits are those of the cgroup vmpod starts the VM's QEMU in: the
// container's CPU controls, and guest RAM plus overhead (vm.MemoryLimit).
func (r *refProcess) limits() refLimits {
	cpu := vmSpec(testPod{}, "", "", nil).Linux.Resources.CPU
	return refLimits{MemoryBytes: vm.MemoryLimit(r.spec, r.host), CPUQuota: *cpu.Quota, CPUPeriod: *cpu.Period}
}

func (r *refProcess) release(dir string) error {
	done, ok := r.prepared[dir]
	if !ok {
		return fmt.Errorf("no VM prepared in %s", dir)
	}
	delete(r.prepared, dir)
	return done()
}

func (r *refProcess) releaseAll() {
	for dir := range r.prepared {
		if err := r.release(dir); err != nil {
			fmt.Fprintf(os.Stderr, "libvirt reference: %v\n", err)
		}
	}
}

// libvirtStart defines and starts the XML vmpod made, to /init: Define,
// Start paused, the console connected, Resume (what vmpod does, so no
// output is lost), the console read from its socket.
func (r *refProcess) libvirtStart(ctx context.Context) (_ startRefReply, retErr error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	l, xml, err := r.prepare(ctx)
	if err != nil {
		return startRefReply{}, err
	}
	defer func() { retErr = errors.Join(retErr, r.release(l.Dir)) }()

	began := time.Now()
	if err := r.conn.Define(ctx, xml); err != nil {
		return startRefReply{}, err
	}
	defined := time.Now()
	if err := r.conn.Start(ctx, r.spec.Name, virt.StartOptions{Paused: true}); err != nil {
		return startRefReply{}, err
	}
	defer r.conn.Destroy(context.WithoutCancel(ctx), r.spec.Name)
	info, err := r.conn.Info(ctx, r.spec.Name)
	if err != nil {
		return startRefReply{}, err
	}
	leave, err := enterBenchCgroup(info.PID, "libvirt", r.limits())
	if err != nil {
		return startRefReply{}, err
	}
	defer func() {
		_ = r.conn.Destroy(context.WithoutCancel(ctx), r.spec.Name)
		retErr = errors.Join(retErr, leave())
	}()
	console, err := net.Dial("unix", l.Console())
	if err != nil {
		return startRefReply{}, err
	}
	defer console.Close()
	if err := r.conn.Resume(ctx, r.spec.Name); err != nil {
		return startRefReply{}, err
	}
	resumed := time.Now()
	first, init, err := readUntil(console, began, initMarker)
	if err != nil {
		return startRefReply{}, err
	}
	return startRefReply{FirstLine: first, Init: init, CPUs: cpusAllowed(info.PID), QEMUCPU: qemuCPU(info.PID),
		Define: defined.Sub(began), Start: resumed.Sub(defined), DomainType: domainType(xml)}, nil
}

// domainType is the type of the domain in xml: kvm, or qemu (TCG).
func domainType(xml string) string {
	var d libvirtxml.Domain
	if d.Unmarshal(xml) != nil {
		return ""
	}
	return d.Type
}

// bareArgs is QEMU's command line for the domain in xml, by hand: the
// same machine, accelerator (and TCG translation cache), firmware ROM,
// CPU, memory, vCPUs, kernel, initrd and command line, the overlay on virtio-blk, the agent's virtio-serial
// port, the serial console on stdout; no NIC, no monitor, no sandbox.
func bareArgs(b *testing.B, xml string, l vm.Layout) (emulator string, args []string) {
	var d libvirtxml.Domain
	if err := d.Unmarshal(xml); err != nil {
		b.Fatal(err)
	}
	// The domain's emulator is the jailer; QEMU is what the jail spec
	// execs, the node's (host.Host.Emulator).
	js, err := jail.Read(l.JailSpec())
	if err != nil {
		b.Fatal(err)
	}
	emulator = js.QEMU
	accel := "tcg"
	if d.Type == "kvm" {
		accel = "kvm"
	} else if f := d.Features; f != nil && f.TCG != nil && f.TCG.TBCache != nil {
		accel += fmt.Sprintf(",tb-size=%d", tbCacheMiB(*f.TCG.TBCache))
	}
	machine := "q35"
	if d.OS != nil && d.OS.Type != nil && d.OS.Type.Machine != "" {
		machine = d.OS.Type.Machine
	}
	args = []string{"-nodefaults", "-no-user-config", "-display", "none",
		"-machine", machine, "-accel", accel,
		"-m", fmt.Sprintf("%dM", memoryMiB(d)), "-smp", fmt.Sprint(d.VCPU.Value)}
	if c := d.CPU; c != nil {
		switch {
		case c.Mode == "host-passthrough":
			args = append(args, "-cpu", "host")
		case c.Mode == "maximum":
			args = append(args, "-cpu", "max")
		case c.Model != nil && c.Model.Value != "":
			args = append(args, "-cpu", c.Model.Value)
		}
	}
	if d.OS != nil && d.OS.Loader != nil && d.OS.Loader.Type == "rom" {
		args = append(args, "-bios", d.OS.Loader.Path) // qboot
	}
	if d.OS != nil {
		args = append(args, "-kernel", d.OS.Kernel, "-append", d.OS.Cmdline)
		if d.OS.Initrd != "" {
			args = append(args, "-initrd", d.OS.Initrd)
		}
	}
	return emulator, append(args,
		"-drive", "file="+l.Overlay()+",format=qcow2,if=none,id=disk0",
		"-device", "virtio-blk-pci,drive=disk0",
		"-device", "virtio-serial-pci",
		"-chardev", "socket,id=qga,path="+filepath.Join(l.VMDir(), "bare-qga.sock")+",server=on,wait=off",
		"-device", "virtserialport,chardev=qga,name=org.qemu.guest_agent.0",
		"-serial", "stdio")
}

func tbCacheMiB(c libvirtxml.DomainFeatureTCGTBCache) uint {
	switch c.Unit {
	case "MiB", "M":
		return c.Size
	case "GiB", "G":
		return c.Size << 10
	default: // KiB
		return c.Size >> 10
	}
}

func memoryMiB(d libvirtxml.Domain) uint {
	m := d.Memory.Value
	switch d.Memory.Unit {
	case "", "KiB", "k":
		return m >> 10
	case "MiB", "M":
		return m
	case "GiB", "G":
		return m << 10
	default:
		return m >> 20 // bytes
	}
}

// readUntil reads serial lines from r and returns, from began, when the
// first line arrived and when the line holding marker did; an error, with
// what was read, if the console ends first.
func readUntil(r io.Reader, began time.Time, marker string) (first, found time.Duration, err error) {
	br := bufio.NewReader(r)
	var seen []string
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			at := time.Since(began)
			if first == 0 {
				first = at
			}
			seen = append(seen, strings.TrimSpace(line))
			if strings.Contains(line, marker) {
				return first, at, nil
			}
		}
		if err != nil {
			return 0, 0, fmt.Errorf("serial console ended before %q: %v; got:\n%s", marker, err, strings.Join(seen, "\n"))
		}
	}
}

// printStartTable prints the medians: vmpod's phases, then the three
// ways side by side with vmpod's ratio to each.
func printStartTable(b *testing.B, domainType string, vmpod, lv, bare []startRun) {
	med := func(runs []startRun, f func(startRun) time.Duration) time.Duration {
		d := make([]time.Duration, len(runs))
		for i, r := range runs {
			d[i] = f(r)
		}
		slices.Sort(d)
		return d[len(d)/2]
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
	var t strings.Builder
	fmt.Fprintf(&t, "\nstart phases: vmpod, medians of %d (the test guest, a %s domain)\n", len(vmpod), domainType)
	fmt.Fprintf(&t, "  %-34s %10s\n", "phase", "vmpod")
	fmt.Fprintf(&t, "  %-34s %10s\n", "shim exec (start command)", ms(med(vmpod, func(r startRun) time.Duration { return r.shimExec })))
	var names []string
	for _, r := range vmpod {
		for _, p := range r.phases {
			if !slices.Contains(names, p.Name) {
				names = append(names, p.Name)
			}
		}
	}
	for _, name := range names {
		fmt.Fprintf(&t, "  %-34s %10s\n", name, ms(med(vmpod, func(r startRun) time.Duration {
			for _, p := range r.phases {
				if p.Name == name {
					return p.Took
				}
			}
			return 0
		})))
	}
	fmt.Fprintf(&t, "  %-34s %10s\n", "Create call (ttrpc, all of Create)", ms(med(vmpod, func(r startRun) time.Duration { return r.create })))
	fmt.Fprintf(&t, "  %-34s %10s\n", "Start -> first serial line", ms(med(vmpod, func(r startRun) time.Duration { return r.startToFirst })))
	fmt.Fprintf(&t, "  %-34s %10s\n", "libvirt reference: Define", ms(med(lv, func(r startRun) time.Duration { return r.define })))
	fmt.Fprintf(&t, "  %-34s %10s\n", "libvirt reference: Start..Resume", ms(med(lv, func(r startRun) time.Duration { return r.start })))
	fmt.Fprintf(&t, "\nstart side by side, medians of %d\n", len(vmpod))
	fmt.Fprintf(&t, "  %-30s %10s %10s %10s %14s %14s\n", "", "vmpod", "libvirt", "bare QEMU", "vmpod/libvirt", "vmpod/bare")
	for _, row := range []struct {
		name string
		f    func(startRun) time.Duration
	}{
		{"create -> first serial line", func(r startRun) time.Duration { return r.firstLine }},
		{"create -> /init", func(r startRun) time.Duration { return r.init }},
	} {
		v, l, q := med(vmpod, row.f), med(lv, row.f), med(bare, row.f)
		fmt.Fprintf(&t, "  %-30s %10s %10s %10s %14.2f %14.2f\n", row.name, ms(v), ms(l), ms(q),
			float64(v)/float64(l), float64(v)/float64(q))
	}
	cpus := func(runs []startRun) string {
		var seen []string
		for _, r := range runs {
			if !slices.Contains(seen, r.cpus) {
				seen = append(seen, r.cpus)
			}
		}
		return strings.Join(seen, ",")
	}
	cpu := func(r startRun) time.Duration { return r.qemuCPU }
	fmt.Fprintf(&t, "  %-30s %10s %10s %10s\n", "QEMU's CPU time to /init", ms(med(vmpod, cpu)), ms(med(lv, cpu)), ms(med(bare, cpu)))
	fmt.Fprintf(&t, "  %-30s %10s %10s %10s\n", "QEMU's CPUs", cpus(vmpod), cpus(lv), cpus(bare))
	fmt.Print(t.String())
	first := func(r startRun) time.Duration { return r.firstLine }
	b.ReportMetric(float64(med(vmpod, first))/float64(med(lv, first)), "vmpod/libvirt")
	b.ReportMetric(float64(med(vmpod, first))/float64(med(bare, first)), "vmpod/bare")
}
