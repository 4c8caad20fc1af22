package nodevm

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ShareDir is where the read-write share is mounted in the VM; run.sh runs
// there. It is the only place the VM writes that the host sees.
const ShareDir = "/vmpod-share"

// ctlDir, inside the share, is where the guest's run unit
// (hack/nodevm/rootfs/nodevm/run) leaves started, output and exit.
const ctlDir = ".nodevm"

// Options says what to run in the VM and on what.
type Options struct {
	// Script becomes ShareDir/run.sh, run as root with ShareDir as its
	// working directory. Without a #! line it runs under /bin/sh.
	Script string
	// Files are copied into the share before the VM starts, keeping their
	// modes: name in the share (slash-separated, relative) -> host path.
	// Files under the host's /tmp must come this way: the VM mounts a fresh
	// tmpfs there. Everything else of the host is already visible read-only.
	Files map[string]string
	// MemoryMiB and CPUs default to 2048 and 2.
	MemoryMiB int
	CPUs      int
	// Timeout bounds the whole run, boot included; default 5 minutes.
	Timeout time.Duration
	// Stall is how long the guest's heartbeat may stand still once run.sh
	// started before the guest counts as stalled: it is then booted once
	// more, from a fresh share (default 90 s; the heartbeat beats every
	// 5 s).
	Stall time.Duration
	// onRunning, if set, is called with QEMU's pid when run.sh started
	// on the first boot (the stall test stops QEMU there).
	onRunning func(pid int)
	// CgroupV1 boots the node on the legacy cgroup v1 hierarchies (systemd
	// still PID 1) instead of cgroup v2.
	CgroupV1 bool
	// Expose lists host directories under /tmp or /var/tmp (which the VM
	// covers with fresh tmpfs) to show read-only at the same path, such as
	// a checkout CI cloned into /tmp. Absolute, clean, without spaces or
	// commas.
	Expose []string
}

// Result is what run.sh did.
type Result struct {
	// ExitCode is run.sh's exit status.
	ExitCode int
	// Output is run.sh's stdout and stderr, interleaved.
	Output string
	// SystemState is `systemctl is-system-running --wait` just before
	// run.sh started: "running", or "degraded" if a unit failed.
	SystemState string
	// Files holds every regular file in the share after the VM stopped
	// except run.sh, Options.Files and the harness's own: name (slash-
	// separated) -> contents.
	Files map[string][]byte
	// Boot is the time from starting QEMU until run.sh started (host
	// clock, to within a quarter second); GuestBoot is the guest's uptime
	// then. Total is QEMU's whole run.
	Boot, GuestBoot, Total time.Duration
	// Serial is the VM's serial console: kernel, /init and systemd.
	Serial string
}

// Run boots a node VM, runs opts.Script in it and returns when the VM has
// powered off. A VM that does not finish within the timeout, or finishes
// without running the script to the end, fails the test (t.Fatal) with the
// serial console in the log. A non-zero exit of the script does not: the
// caller judges Result.
func Run(t testing.TB, opts Options) Result {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("nodevm needs root (9p passthrough keeps the guest's owners and modes): run the tests as root, as make test does")
	}
	opts = withDefaults(opts)
	art := artifacts(t)
	for attempt := 1; ; attempt++ {
		res, share, err := boot(t, art, opts)
		if errors.Is(err, errStalled) && attempt == 1 {
			t.Logf("%v; booting the node VM once more", err)
			opts.onRunning = nil
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if res.Files, err = collect(share, opts); err != nil {
			t.Fatal(err)
		}
		return res
	}
}

// boot runs opts.Script in a node VM booted from art, with a share of its
// own, and returns its result and the share.
func boot(t testing.TB, art string, opts Options) (Result, string, error) {
	t.Helper()
	work := t.TempDir()
	share := filepath.Join(work, "share")
	if err := prepareShare(share, opts); err != nil {
		return Result{}, "", err
	}
	vm, err := start(t, art, work, share, opts)
	if err != nil {
		return Result{}, "", err
	}
	// Whatever fails the test, in here or in the caller's checks, the
	// console says why the node misbehaved. Runs before QEMU's kill and
	// TempDir's removal (cleanups run last-registered first).
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("nodevm: serial console:\n%s", stripANSI(vm.serial()))
		}
	})
	vm.onRunning = opts.onRunning
	res, err := vm.wait(t, opts.Timeout, opts.Stall)
	return res, share, err
}

func withDefaults(o Options) Options {
	if o.MemoryMiB == 0 {
		o.MemoryMiB = 2048
	}
	if o.CPUs == 0 {
		o.CPUs = 2
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Minute
	}
	if o.Stall == 0 {
		o.Stall = 90 * time.Second
	}
	var expose []string
	for _, d := range o.Expose {
		if d != filepath.Clean(d) || !filepath.IsAbs(d) || strings.ContainsAny(d, " ,\t\n") {
			panic(fmt.Sprintf("nodevm: Expose %q: want an absolute clean path without spaces or commas", d))
		}
		if under(d, "/tmp") || under(d, "/var/tmp") {
			expose = append(expose, d)
		}
	}
	o.Expose = expose
	if !strings.HasPrefix(o.Script, "#!") {
		o.Script = "#!/bin/sh\n" + o.Script
	}
	return o
}

func prepareShare(share string, o Options) error {
	if err := os.MkdirAll(share, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(share, "run.sh"), []byte(o.Script), 0o755); err != nil {
		return err
	}
	for name, src := range o.Files {
		dst, err := sharePath(share, name)
		if err != nil {
			return err
		}
		if err := copyFile(dst, src); err != nil {
			return fmt.Errorf("nodevm: share file %q: %w", name, err)
		}
	}
	return nil
}

// sharePath refuses names that would leave the share or clash with the
// harness's own files.
func sharePath(share, name string) (string, error) {
	clean := filepath.Clean(filepath.FromSlash(name))
	if !filepath.IsLocal(clean) || clean == "run.sh" || clean == ctlDir ||
		strings.HasPrefix(clean, ctlDir+string(filepath.Separator)) {
		return "", fmt.Errorf("nodevm: share file name %q: must be relative, inside the share, not run.sh or %s", name, ctlDir)
	}
	return filepath.Join(share, clean), nil
}

func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, st.Mode().Perm())
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// collect reads back what run.sh left in the share.
func collect(share string, o Options) (map[string][]byte, error) {
	skip := map[string]bool{"run.sh": true}
	for name := range o.Files {
		skip[filepath.ToSlash(filepath.Clean(filepath.FromSlash(name)))] = true
	}
	files := map[string][]byte{}
	err := filepath.WalkDir(share, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(share, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() && rel == ctlDir {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() || skip[rel] {
			return nil
		}
		b, err := os.ReadFile(p)
		files[rel] = b
		return err
	})
	return files, err
}

// readResult reads what the guest's run unit wrote into ctlDir.
func readResult(share string) (Result, error) {
	var r Result
	ctl := filepath.Join(share, ctlDir)
	exit, err := os.ReadFile(filepath.Join(ctl, "exit"))
	if errors.Is(err, fs.ErrNotExist) {
		return r, errors.New("nodevm: the VM stopped before run.sh finished (no exit code in the share)")
	}
	if err != nil {
		return r, err
	}
	if r.ExitCode, err = strconv.Atoi(strings.TrimSpace(string(exit))); err != nil {
		return r, fmt.Errorf("nodevm: exit code %q: %w", exit, err)
	}
	out, err := os.ReadFile(filepath.Join(ctl, "output"))
	if err != nil {
		return r, err
	}
	r.Output = string(out)
	state, _ := os.ReadFile(filepath.Join(ctl, "state"))
	r.SystemState = strings.TrimSpace(string(state))
	r.GuestBoot = guestUptime(share)
	return r, nil
}

// guestUptime is the guest's /proc/uptime when run.sh started, 0 if not yet.
func guestUptime(share string) time.Duration {
	b, err := os.ReadFile(filepath.Join(share, ctlDir, "started"))
	if err != nil {
		return 0
	}
	s, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
	if err != nil {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}

// under reports whether p is dir or below it.
func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
