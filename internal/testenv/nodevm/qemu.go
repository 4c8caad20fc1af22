package nodevm

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cmdline: the kernel's side of the node. cgroup_no_v1=all leaves every
// controller to cgroup2; panic=-1 with QEMU's -no-reboot turns a panic or a
// failed /init into QEMU exiting instead of a hang until the timeout.
// random.trust_cpu: with -cpu max's RDRAND the CRNG is ready at once, where
// otherwise dbus-daemon waits ~8 s for entropy under TCG. quiet: printing
// the kernel's boot messages on the emulated UART costs ~0.5 s; warnings
// and errors still show.
const cmdline = "console=ttyS0 quiet panic=-1 cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1 random.trust_cpu=on"

// Progress is logged this often while the VM runs.
const progressEvery = 15 * time.Second

type vm struct {
	cmd        *exec.Cmd
	share      string
	serialPath string
	stderrPath string
	started    time.Time
	done       chan error // QEMU's exit, once
	onRunning  func(pid int)
}

// qemuArgs is the whole machine: TCG always (a /dev/kvm here may not run a
// Linux guest), q35, the PVH vmlinux entered directly (qboot: no BIOS to
// emulate), the host root read-only and the share read-write over 9p, no
// network device, nothing on a display.
func qemuArgs(art, share, serial string, o Options) []string {
	fsdev := func(id, path, tag string, ro bool) []string {
		spec := "local,id=" + id + ",path=" + path + ",security_model=passthrough,multidevs=remap"
		if ro {
			spec += ",readonly=on"
		}
		return []string{"-fsdev", spec, "-device", "virtio-9p-pci,fsdev=" + id + ",mount_tag=" + tag}
	}
	args := []string{
		"-accel", "tcg", "-machine", "q35", "-cpu", "max",
		"-m", strconv.Itoa(o.MemoryMiB), "-smp", strconv.Itoa(o.CPUs),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-nic", "none",
		"-bios", "/usr/share/qemu/qboot.rom",
		"-kernel", filepath.Join(art, "vmlinux"), "-initrd", filepath.Join(art, "initrd.img"),
		"-append", appendLine(o),
		"-serial", "file:" + serial,
	}
	args = append(args, fsdev("hostroot", "/", "hostroot", true)...)
	return append(args, fsdev("share", share, "vmpodshare", false)...)
}

func start(t testing.TB, art, work, share string, o Options) (*vm, error) {
	t.Helper()
	v := &vm{
		share:      share,
		serialPath: filepath.Join(work, "serial.log"),
		stderrPath: filepath.Join(work, "qemu.stderr"),
		done:       make(chan error, 1),
	}
	stderr, err := os.Create(v.stderrPath)
	if err != nil {
		return nil, err
	}
	defer stderr.Close()
	v.cmd = exec.Command("qemu-system-x86_64", qemuArgs(art, share, v.serialPath, o)...)
	v.cmd.Stdout, v.cmd.Stderr = stderr, stderr
	// Killed with the test binary too (a go test -timeout panic runs no
	// cleanups).
	v.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	v.started = time.Now()
	if err := v.cmd.Start(); err != nil {
		return nil, fmt.Errorf("nodevm: starting QEMU: %w", err)
	}
	go func() { v.done <- v.cmd.Wait() }()
	// Registered after t.TempDir's cleanup, so it runs first: QEMU is gone
	// before its share is removed.
	t.Cleanup(v.kill)
	return v, nil
}

// kill stops QEMU by its PID, if it still runs, and reaps it.
func (v *vm) kill() {
	select {
	case err := <-v.done:
		v.done <- err
		return
	default:
	}
	_ = v.cmd.Process.Kill()
	v.done <- <-v.done
}

// errStalled is a guest that stopped making progress as a whole: its
// heartbeat (a shell loop beside run.sh) stopped. Seen here once, under
// TCG with two vCPUs: the guest froze in the middle of a test whose own
// timeouts never fired, QEMU busy. It says nothing of the test.
var errStalled = errors.New("nodevm: the guest stalled")

// wait returns once QEMU exits; it kills QEMU after timeout, or when the
// guest's heartbeat has not changed for stall once run.sh started
// (errStalled).
func (v *vm) wait(t testing.TB, timeout, stall time.Duration) (Result, error) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	poll := time.NewTicker(250 * time.Millisecond)
	defer poll.Stop()
	nextLog := v.started.Add(progressEvery)
	var boot time.Duration
	var lastBeat string
	var lastBeatAt time.Time
	for {
		select {
		case err := <-v.done:
			v.done <- err
			total := time.Since(v.started)
			if err != nil {
				return Result{}, fmt.Errorf("nodevm: QEMU: %v\n%s", err, v.qemuStderr())
			}
			r, rerr := readResult(v.share)
			if rerr != nil {
				return Result{}, fmt.Errorf("%w\n%s", rerr, v.qemuStderr())
			}
			if boot == 0 {
				boot = total
			}
			r.Boot, r.Total, r.Serial = boot, total, v.serial()
			t.Logf("nodevm: run.sh started %.1fs after QEMU (guest uptime %.1fs), exited %d; QEMU ran %.1fs",
				boot.Seconds(), r.GuestBoot.Seconds(), r.ExitCode, total.Seconds())
			return r, nil
		case <-deadline.C:
			v.kill()
			return Result{}, fmt.Errorf("nodevm: no result within %v (QEMU killed)", timeout)
		case now := <-poll.C:
			if boot == 0 && guestUptime(v.share) > 0 {
				boot = now.Sub(v.started)
				lastBeatAt = now // the stall clock starts with run.sh
				if v.onRunning != nil {
					v.onRunning(v.cmd.Process.Pid)
				}
			}
			if beat := heartbeat(v.share); beat != lastBeat {
				lastBeat, lastBeatAt = beat, now
			} else if boot > 0 && now.Sub(lastBeatAt) > stall {
				v.kill()
				return Result{}, fmt.Errorf("%w: no heartbeat from the guest for %v, %v after run.sh started (its output: %s)",
					errStalled, stall, now.Sub(v.started)-boot, lastLine(v.output()))
			}
			if now.After(nextLog) {
				nextLog = nextLog.Add(progressEvery)
				v.progress(t, now, boot)
			}
		}
	}
}

func (v *vm) progress(t testing.TB, now time.Time, boot time.Duration) {
	t.Helper()
	elapsed := now.Sub(v.started).Round(time.Second)
	if boot == 0 {
		t.Logf("nodevm: %v, booting; serial: %s", elapsed, lastLine(v.serial()))
		return
	}
	t.Logf("nodevm: %v, run.sh running for %v; output: %s", elapsed, (now.Sub(v.started) - boot).Round(time.Second), lastLine(v.output()))
}

// output is what run.sh has written so far.
func (v *vm) output() string {
	b, _ := os.ReadFile(filepath.Join(v.share, ctlDir, "output"))
	return string(b)
}

// heartbeat is the guest's last heartbeat, "" before the first.
func heartbeat(share string) string {
	b, _ := os.ReadFile(filepath.Join(share, ctlDir, "heartbeat"))
	return string(b)
}

func (v *vm) serial() string {
	b, _ := os.ReadFile(v.serialPath)
	return string(b)
}

func (v *vm) qemuStderr() string {
	b, _ := os.ReadFile(v.stderrPath)
	return string(b)
}

// lastLine is the last non-empty line, without systemd's colour codes.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\r\n"), "\n")
	return fmt.Sprintf("%q", strings.TrimSpace(stripANSI(lines[len(lines)-1])))
}

func stripANSI(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '[' {
			j := i + 2
			for j < len(s) && (s[j] < '@' || s[j] > '~') {
				j++
			}
			i = j
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// appendLine is cmdline plus the host directories /init re-exposes over
// the VM's own /tmp and /var/tmp (vmpod.expose=a,b).
func appendLine(o Options) string {
	line := cmdline
	if o.CgroupV1 {
		line = strings.NewReplacer("cgroup_no_v1=all ", "", "systemd.unified_cgroup_hierarchy=1", "systemd.unified_cgroup_hierarchy=0").Replace(line)
	}
	if len(o.Expose) > 0 {
		line += " vmpod.expose=" + strings.Join(o.Expose, ",")
	}
	return line
}
