package podnet_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"

	"github.com/vmpod/vmpod/pkg/podnet"
)

// helperEnv makes the test binary a stand-in for the shim (see TestMain).
const helperEnv = "VMPOD_PODNET_HELPER"

type helperConfig struct {
	Interface, Tap, ResolvConf, Hostname string
	// QEMU is the command line without the NIC, which the helper adds.
	QEMU []string
}

// TestMain runs the shim stand-in when TestGuest starts this binary with
// helperEnv set inside the pod netns, and the tests otherwise.
func TestMain(m *testing.M) {
	if cfg := os.Getenv(helperEnv); cfg != "" {
		os.Exit(podHelper(cfg))
	}
	os.Exit(m.Run())
}

// podHelper does what the shim does, in the network namespace its whole
// process was started in: Inspect, Attach, start QEMU on the tap with the
// pod's MAC; then, once stdin closes, kill that QEMU and Close.
//
// Protocol on stdout: "pod <Pod>", "qemu <pid>", and "closed" at the end.
// The exit status is 0 only if QEMU ran until asked to stop and Close
// succeeded.
func podHelper(raw string) int {
	// QEMU's parent-death signal follows the thread that started it.
	runtime.LockOSThread()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})))
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "helper: "+format+"\n", args...)
		return 1
	}
	var cfg helperConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		return fail("config: %v", err)
	}
	p, err := podnet.Inspect(cfg.Interface)
	if err != nil {
		return fail("%v", err)
	}
	if p.DNS, err = podnet.ResolvConf(cfg.ResolvConf); err != nil {
		return fail("%v", err)
	}
	p.Hostname = cfg.Hostname
	fmt.Printf("pod %+v\n", p)

	a, err := podnet.Attach(p, cfg.Tap)
	if err != nil {
		return fail("%v", err)
	}
	args := append(cfg.QEMU[1:],
		"-netdev", "tap,id=n0,ifname="+a.Tap()+",script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=n0,mac="+a.MAC().String())
	qemu := exec.Command(cfg.QEMU[0], args...)
	qemu.Stdout, qemu.Stderr = os.Stderr, os.Stderr
	qemu.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := qemu.Start(); err != nil {
		a.Close()
		return fail("starting QEMU: %v", err)
	}
	fmt.Printf("qemu %d\n", qemu.Process.Pid)

	exited := make(chan error, 1)
	go func() { exited <- qemu.Wait() }()
	stop := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	rc := 0
	select {
	case <-stop:
		qemu.Process.Kill() // the one process this helper started
		<-exited
	case err := <-exited:
		rc = fail("QEMU exited by itself: %v", err)
	}
	if err := a.Close(); err != nil {
		rc = fail("%v", err)
	}
	fmt.Println("closed")
	return rc
}
