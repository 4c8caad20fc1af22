package node

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// probePayload is the probe's guest, a boot sector assembled from
// kvmprobe.asm (which says what it does and prints).
//
//go:embed kvmprobe.bin
var probePayload []byte

const (
	// probeMarkers is what the payload prints when it ran to its end.
	probeMarkers = "RIPLM"
	// probeExit is QEMU's exit status when the payload wrote 0x2a to
	// isa-debug-exit: (0x2a << 1) | 1.
	probeExit = 85
	// probeVersion changes when the payload or the rules change, so that
	// cached verdicts of an older probe are not trusted.
	probeVersion = 1
	// maxSlowdown: KVM counts only if it runs the payload at most this
	// much slower than TCG does. A real KVM runs it faster; a "KVM" nested
	// in a hypervisor without hardware virtualization (PVM and the like)
	// ran it 5x slower here, and a Linux guest not at all in a minute.
	maxSlowdown = 1.5
)

// KVM is the node's verdict on KVM: usable only after a guest has run
// under it here, with the CPU model vmpod gives a KVM guest
// (host-passthrough), at least as fast as under software emulation.
type KVM struct {
	// Usable: VMs may run under KVM here.
	Usable bool `json:"usable"`
	// Reason says why in one line: what failed, or how fast the probe ran.
	Reason string `json:"reason"`
	// KVMTime and TCGTime are the probe guest's run times (whole QEMU
	// process, best of the runs); zero when it did not get that far.
	KVMTime time.Duration `json:"kvmTime,omitempty"`
	TCGTime time.Duration `json:"tcgTime,omitempty"`
	// Took is how long the probe took in all.
	Took time.Duration `json:"took"`
	// Key names what the verdict holds for: the probe, QEMU, the kernel
	// and /dev/kvm. A cached verdict with another key is probed again.
	Key string `json:"key"`
	// At is when the probe ran.
	At time.Time `json:"at"`
}

// ProbeOptions tune the KVM probe. The zero value probes this node's
// QEMU with the defaults below and caches nothing.
type ProbeOptions struct {
	// QEMU is the emulator; default /usr/bin/qemu-system-x86_64.
	QEMU string
	// Device is the KVM device checked before QEMU runs; default /dev/kvm.
	// (QEMU itself always opens /dev/kvm.)
	Device string
	// Timeout bounds each QEMU run; default 10s.
	Timeout time.Duration
	// Runs is how many times each accelerator runs the payload (the best
	// time counts); default 2.
	Runs int
	// CacheFile keeps the verdict across processes and restarts ("" keeps
	// none). CheckKVM reuses it while its Key matches.
	CacheFile string
}

// DefaultKVMCache is where a node keeps its KVM verdict: on disk, so it
// outlives a reboot, and keyed by the kernel, so a new kernel probes again.
const DefaultKVMCache = "/var/lib/vmpod/kvm-probe.json"

func (o ProbeOptions) withDefaults() ProbeOptions {
	if o.QEMU == "" {
		o.QEMU = "/usr/bin/qemu-system-x86_64"
	}
	if o.Device == "" {
		o.Device = "/dev/kvm"
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Runs <= 0 {
		o.Runs = 2
	}
	return o
}

// CheckKVM returns the cached verdict when it still holds for this QEMU,
// kernel and /dev/kvm, and probes (and caches) otherwise. Concurrent
// callers on one node probe once: the cache file is locked while probing.
func CheckKVM(ctx context.Context, o ProbeOptions) (KVM, error) {
	o = o.withDefaults()
	key, err := probeKey(o)
	if err != nil {
		return KVM{}, err
	}
	if o.CacheFile == "" {
		return probeKVM(ctx, o, key)
	}
	if err := os.MkdirAll(filepath.Dir(o.CacheFile), 0o755); err != nil {
		return KVM{}, fmt.Errorf("KVM probe cache: %w", err)
	}
	lock, err := os.OpenFile(o.CacheFile+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return KVM{}, fmt.Errorf("KVM probe cache: %w", err)
	}
	defer lock.Close()
	if err := Flock(ctx, lock); err != nil {
		return KVM{}, fmt.Errorf("KVM probe cache: %w", err)
	}
	if v, ok := readVerdict(o.CacheFile); ok && v.Key == key {
		return v, nil
	}
	v, err := probeKVM(ctx, o, key)
	if err != nil {
		return KVM{}, err
	}
	if err := writeVerdict(o.CacheFile, v); err != nil {
		return KVM{}, err
	}
	return v, nil
}

// ProbeKVM probes without looking at any cache.
func ProbeKVM(ctx context.Context, o ProbeOptions) (KVM, error) {
	o = o.withDefaults()
	key, err := probeKey(o)
	if err != nil {
		return KVM{}, err
	}
	return probeKVM(ctx, o, key)
}

// probeKVM runs the payload under TCG (the baseline, and a check that the
// payload and QEMU work at all) and then under KVM. An error means the
// probe itself could not run (no QEMU, TCG failing): that is no verdict.
func probeKVM(ctx context.Context, o ProbeOptions, key string) (KVM, error) {
	start := time.Now()
	v := KVM{Key: key, At: start.UTC().Truncate(time.Second)}
	done := func(usable bool, format string, a ...any) (KVM, error) {
		v.Usable, v.Reason, v.Took = usable, fmt.Sprintf(format, a...), time.Since(start)
		return v, nil
	}
	if st, err := os.Stat(o.Device); err != nil {
		return done(false, "no %s: %v", o.Device, errors.Unwrap(err))
	} else if st.Mode()&os.ModeCharDevice == 0 {
		return done(false, "%s is not a character device", o.Device)
	}

	dir, err := os.MkdirTemp("", "vmpod-kvm-probe-")
	if err != nil {
		return KVM{}, err
	}
	defer os.RemoveAll(dir)
	disk := filepath.Join(dir, "probe.img")
	// SeaBIOS does not read a disk of one sector: pad to 1 MiB (sparse).
	if err := os.WriteFile(disk, probePayload, 0o600); err != nil {
		return KVM{}, err
	}
	if err := os.Truncate(disk, 1<<20); err != nil {
		return KVM{}, err
	}

	tcg, err := bestRun(ctx, o, disk, "tcg")
	if err != nil {
		return KVM{}, err
	}
	if !tcg.complete() {
		return KVM{}, fmt.Errorf("KVM probe: the payload fails under TCG too, so the probe proves nothing: %s", tcg.describe())
	}
	v.TCGTime = tcg.took
	kvm, err := bestRun(ctx, o, disk, "kvm")
	if err != nil {
		return KVM{}, err
	}
	if !kvm.complete() {
		return done(false, "a guest under KVM failed: %s", kvm.describe())
	}
	v.KVMTime = kvm.took
	if float64(kvm.took) > maxSlowdown*float64(tcg.took) {
		return done(false, "a guest under KVM ran the probe in %s, slower than software emulation (%s): "+
			"KVM is likely nested without hardware virtualization", round(kvm.took), round(tcg.took))
	}
	return done(true, "a guest under KVM ran the probe in %s (software emulation: %s)", round(kvm.took), round(tcg.took))
}

func round(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }

// probeRun is one QEMU run of the payload.
type probeRun struct {
	accel   string
	serial  string // what the guest printed
	exit    int    // QEMU's exit status; -1 when killed
	stderr  string // QEMU's last words
	timeout bool
	took    time.Duration
}

func (r probeRun) complete() bool { return r.exit == probeExit && r.serial == probeMarkers }

// describe says how far the guest got and why it stopped.
func (r probeRun) describe() string {
	stage := "before the firmware loaded it"
	if r.serial != "" {
		stage = "after " + markerStage(r.serial[len(r.serial)-1])
	}
	switch {
	case r.timeout:
		return fmt.Sprintf("it hung %s (no progress in %s)", stage, round(r.took))
	case r.stderr != "":
		return fmt.Sprintf("QEMU exited with status %d %s: %s", r.exit, stage, r.stderr)
	default:
		return fmt.Sprintf("QEMU exited with status %d %s (printed %q)", r.exit, stage, r.serial)
	}
}

func markerStage(m byte) string {
	switch m {
	case 'R':
		return "entering real mode"
	case 'I':
		return "taking timer interrupts"
	case 'P':
		return "entering protected mode"
	case 'L':
		return "entering long mode with paging"
	case 'M':
		return "touching 32 MiB"
	}
	return fmt.Sprintf("printing %q", m)
}

// bestRun runs the payload o.Runs times and keeps the fastest complete
// run, or the first incomplete one (an incomplete run is the verdict).
func bestRun(ctx context.Context, o ProbeOptions, disk, accel string) (probeRun, error) {
	var best probeRun
	for i := 0; i < o.Runs; i++ {
		r, err := runPayload(ctx, o, disk, accel)
		if err != nil {
			return probeRun{}, err
		}
		if !r.complete() {
			return r, nil
		}
		if i == 0 || r.took < best.took {
			best = r
		}
	}
	return best, nil
}

// runPayload boots the payload once. The machine is the q35 vmpod
// defines; under KVM the CPU is the host's, as vmpod's auto policy gives.
func runPayload(ctx context.Context, o ProbeOptions, disk, accel string) (probeRun, error) {
	args := []string{
		"-nodefaults", "-no-user-config", "-display", "none", "-monitor", "none",
		"-machine", "q35", "-accel", accel, "-m", "64",
		"-serial", "stdio", "-no-reboot",
		"-device", "isa-debug-exit,iobase=0xf4,iosize=4",
		"-drive", "file=" + disk + ",format=raw,if=ide",
	}
	if accel == "kvm" {
		args = append(args, "-cpu", "host")
	}
	runCtx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	cmd := exec.CommandContext(runCtx, o.QEMU, args...)
	var serial, stderr bytes.Buffer
	cmd.Stdin = nil
	cmd.Stdout = &serial
	cmd.Stderr = &stderr
	cmd.Cancel = func() error { return cmd.Process.Kill() }
	start := time.Now()
	err := cmd.Run()
	r := probeRun{accel: accel, serial: serial.String(), took: time.Since(start), stderr: lastLine(stderr.String())}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		r.exit = 0
	case errors.As(err, &exitErr):
		r.exit = exitErr.ExitCode()
	default:
		return probeRun{}, fmt.Errorf("KVM probe: run %s: %w", o.QEMU, err)
	}
	if ctx.Err() != nil {
		return probeRun{}, ctx.Err()
	}
	r.timeout = runCtx.Err() != nil
	return r, nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// probeKey identifies what a verdict holds for. It changes when QEMU is
// replaced (size, mtime, inode), the kernel changes (release and build),
// /dev/kvm appears, goes or is another device, or the probe changes.
func probeKey(o ProbeOptions) (string, error) {
	q, err := os.Stat(o.QEMU)
	if err != nil {
		return "", fmt.Errorf("KVM probe: %w", err)
	}
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return "", fmt.Errorf("KVM probe: uname: %w", err)
	}
	dev := "none"
	if st, err := os.Stat(o.Device); err == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			dev = fmt.Sprintf("%d:%d", unix.Major(sys.Rdev), unix.Minor(sys.Rdev))
		}
	}
	qsys, _ := q.Sys().(*syscall.Stat_t)
	var ino uint64
	if qsys != nil {
		ino = qsys.Ino
	}
	return fmt.Sprintf("probe=%d qemu=%s:%d:%d:%d kernel=%s %s device=%s",
		probeVersion, o.QEMU, q.Size(), q.ModTime().Unix(), ino,
		unix.ByteSliceToString(uts.Release[:]), unix.ByteSliceToString(uts.Version[:]), dev), nil
}

func readVerdict(path string) (KVM, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return KVM{}, false
	}
	var v KVM
	if err := json.Unmarshal(b, &v); err != nil || v.Key == "" {
		return KVM{}, false // a bad cache is probed again, not trusted
	}
	return v, true
}

// writeVerdict replaces the cache atomically.
func writeVerdict(path string, v KVM) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".kvm-probe-*")
	if err != nil {
		return fmt.Errorf("KVM probe cache: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, bytes.NewReader(append(b, '\n'))); err != nil {
		tmp.Close()
		return fmt.Errorf("KVM probe cache: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("KVM probe cache: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("KVM probe cache: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("KVM probe cache: %w", err)
	}
	return nil
}

// Flock takes an exclusive lock on f, giving up when ctx ends.
func Flock(ctx context.Context, f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return err
		}
		// Another process probes: wait for its verdict.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
