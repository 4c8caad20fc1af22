package shim_test

import (
	"bufio"
	"context"
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
	"libvirt.org/go/libvirtxml"

	"github.com/vmpod/vmpod/internal/testguest"
	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/jail"
	"github.com/vmpod/vmpod/pkg/node"
	"github.com/vmpod/vmpod/pkg/node/embedded"
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
//     embedded driver in this process (paused, the console connected,
//     resumed, so no output is lost), the console read from its socket;
//   - bare QEMU: the same QEMU binary, kernel, initrd, command line,
//     overlay disk, machine, CPU, memory and agent channel started by
//     hand, unjailed, the console on its stdout.
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
	c, qemuPID := e.runPod(b, ctx)
	e.stdout.waitFor(b, initMarker, 2*time.Minute)
	first, _, _ := e.stdout.when("")
	initAt, _, _ := e.stdout.when(initMarker)
	e.shimLog.waitFor(b, "phases=", 10*time.Second)
	_, line, _ := e.shimLog.when("phases=")
	phases, err := vm.ParsePhases(logField(line, "phases"))
	if err != nil {
		b.Fatalf("shim log %q: %v", line, err)
	}
	r := startRun{
		firstLine: first.Sub(e.createdAt), init: initAt.Sub(e.createdAt),
		shimExec: e.shimExec, create: e.startedAt.Sub(e.createdAt), startToFirst: first.Sub(e.startedAt),
		phases: phases, cpus: cpusAllowed(int(qemuPID)),
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

// logField is the value of key="..." in a logrus text line.
func logField(line, key string) string {
	_, rest, ok := strings.Cut(line, key+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// startReference is libvirt's embedded driver in this process, on a root
// of its own, with the capabilities cache the shims use.
type startReference struct {
	root   string
	conn   *libvirt.Conn
	rt     *vm.Runtime
	host   host.Host
	spec   vmspec.Spec
	rootfs string
	// domainType is the domain's type in vmpod's XML: kvm, or qemu (TCG).
	domainType string
	// jailer links to the jailer vmpod's domains name (vmpod-qemu), so
	// the reference's QEMU starts through the same program.
	jailer string
}

func newStartReference(b *testing.B) *startReference {
	ctx := context.Background()
	root, err := os.MkdirTemp("/tmp", "vmpod-ref-") // short: socket paths
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(root) })
	o := node.Options{CapsCache: filepath.Join(filepath.Dir(buildShim(b)), "caps"), Pod: true}
	r := &startReference{root: root}
	if r.conn, err = embedded.Open(ctx, filepath.Join(root, "libvirt"), o); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.conn.Close() })
	r.rt = vm.NewRuntime(r.conn)
	if r.host, err = node.HostOf(ctx, r.conn, o); err != nil {
		b.Fatal(err)
	}
	p := testPod{sandboxID: "ref", vmID: "ref", cgroupParent: "/ref"}
	if r.spec, err = vmspec.FromOCI(vmSpec(p, "", "", nil)); err != nil {
		b.Fatal(err)
	}
	r.spec.NICs = nil
	r.rootfs = testguest.Rootfs(b, root)
	// The jailer the node daemon links, built next to the shim.
	bin := filepath.Join(filepath.Dir(buildShim(b)), jail.EmulatorName)
	r.jailer = filepath.Join(root, "jailer", jail.EmulatorName)
	if err := os.MkdirAll(filepath.Dir(r.jailer), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.Symlink(bin, r.jailer); err != nil {
		b.Fatal(err)
	}
	return r
}

// prepare makes, through pkg/vm, every file the domain names (overlay,
// jail, VM dir) and returns the domain XML vmpod defined for it, no
// longer defined; done removes it all.
func (r *startReference) prepare(b *testing.B) (l vm.Layout, xml string, done func()) {
	ctx := context.Background()
	dir, err := os.MkdirTemp(r.root, "vm-")
	if err != nil {
		b.Fatal(err)
	}
	l = vm.Layout{Dir: dir}
	j, err := vm.LeaseJail(r.root, jail.DefaultRange, l, 4<<30)
	if err != nil {
		b.Fatal(err)
	}
	j.LibvirtRoot = filepath.Join(r.root, "libvirt")
	j.Jailer = r.jailer
	img, err := vm.InspectImage(ctx, r.rootfs, j, l)
	if err != nil {
		b.Fatal(err)
	}
	m, err := r.rt.Create(ctx, vm.Config{Spec: r.spec, Host: r.host, Image: img, Layout: l, Jail: j})
	if err != nil {
		b.Fatal(err)
	}
	done = func() {
		if err := m.Delete(context.Background()); err != nil {
			b.Error(err)
		}
		if err := vm.ReleaseJail(r.root, l); err != nil {
			b.Error(err)
		}
		os.RemoveAll(dir)
	}
	data, err := os.ReadFile(filepath.Join(r.root, "libvirt", "etc", "qemu", r.spec.Name+".xml"))
	if err != nil {
		done()
		b.Fatal(err)
	}
	if err := r.conn.Undefine(ctx, r.spec.Name); err != nil {
		done()
		b.Fatal(err)
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(string(data)); err != nil {
		done()
		b.Fatal(err)
	}
	r.domainType = d.Type
	return l, string(data), done
}

// libvirtStart defines and starts the XML vmpod made, to /init.
func (r *startReference) libvirtStart(b *testing.B) startRun {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, xml, done := r.prepare(b)
	defer done()

	began := time.Now()
	if err := r.conn.Define(ctx, xml); err != nil {
		b.Fatal(err)
	}
	defined := time.Now()
	if err := r.conn.Start(ctx, r.spec.Name, virt.StartOptions{Paused: true}); err != nil {
		b.Fatal(err)
	}
	console, err := net.Dial("unix", l.Console())
	if err != nil {
		b.Fatal(err)
	}
	defer console.Close()
	if err := r.conn.Resume(ctx, r.spec.Name); err != nil {
		b.Fatal(err)
	}
	resumed := time.Now()
	first, init := readUntil(b, console, began, initMarker, func() string { return "" })
	info, err := r.conn.Info(ctx, r.spec.Name)
	if err != nil {
		b.Fatal(err)
	}
	cpus := cpusAllowed(info.PID)
	if err := r.conn.Destroy(ctx, r.spec.Name); err != nil {
		b.Error(err)
	}
	return startRun{firstLine: first, init: init, cpus: cpus, define: defined.Sub(began), start: resumed.Sub(defined)}
}

// bareStart starts QEMU by hand with what the domain XML names, to /init.
func (r *startReference) bareStart(b *testing.B) startRun {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, xml, done := r.prepare(b)
	defer done()
	args := bareArgs(b, xml, l)

	began := time.Now()
	cmd := exec.CommandContext(ctx, r.host.Emulator, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	first, init := readUntil(b, out, began, initMarker, func() string { return fmt.Sprintf("QEMU %v: %s", args, stderr.String()) })
	return startRun{firstLine: first, init: init, cpus: cpusAllowed(cmd.Process.Pid)}
}

// bareArgs is QEMU's command line for the domain in xml, by hand: the
// same machine, accelerator (and TCG translation cache), firmware ROM,
// CPU, memory, vCPUs, kernel, initrd and command line, the overlay on virtio-blk, the agent's virtio-serial
// port, the serial console on stdout; no NIC, no monitor, no sandbox.
func bareArgs(b *testing.B, xml string, l vm.Layout) []string {
	var d libvirtxml.Domain
	if err := d.Unmarshal(xml); err != nil {
		b.Fatal(err)
	}
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
	args := []string{"-nodefaults", "-no-user-config", "-display", "none",
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
	return append(args,
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
// first line arrived and when the line holding marker did; context adds
// to the failure when the console ends first.
func readUntil(b *testing.B, r io.Reader, began time.Time, marker string, context func() string) (first, found time.Duration) {
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
				return first, at
			}
		}
		if err != nil {
			b.Fatalf("serial console ended before %q: %v; got:\n%s\n%s", marker, err, strings.Join(seen, "\n"), context())
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
	fmt.Fprintf(&t, "  %-30s %10s %10s %10s\n", "QEMU's CPUs", cpus(vmpod), cpus(lv), cpus(bare))
	fmt.Print(t.String())
	first := func(r startRun) time.Duration { return r.firstLine }
	b.ReportMetric(float64(med(vmpod, first))/float64(med(lv, first)), "vmpod/libvirt")
	b.ReportMetric(float64(med(vmpod, first))/float64(med(bare, first)), "vmpod/bare")
}
