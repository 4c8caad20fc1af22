package node

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestProbePayload: the embedded payload is what kvmprobe.asm assembles to.
func TestProbePayload(t *testing.T) {
	nasm, err := exec.LookPath("nasm")
	if err != nil {
		t.Fatal("nasm is missing: run hack/install-deps.sh")
	}
	out := filepath.Join(t.TempDir(), "probe.bin")
	if b, err := exec.Command(nasm, "-f", "bin", "-o", out, "kvmprobe.asm").CombinedOutput(); err != nil {
		t.Fatalf("nasm: %v: %s", err, b)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, probePayload) {
		t.Fatalf("kvmprobe.bin is stale: run nasm -f bin -o pkg/node/kvmprobe.bin pkg/node/kvmprobe.asm")
	}
	if len(got) != 512 || got[510] != 0x55 || got[511] != 0xaa {
		t.Fatalf("payload is %d bytes, not a boot sector", len(got))
	}
}

func requireQEMU(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/qemu-system-x86_64"); err != nil {
		t.Fatal("QEMU is missing: run hack/install-deps.sh")
	}
}

// TestProbeKVMHere probes this machine as it is. The verdict depends on
// the machine (no /dev/kvm, a working one, or one that cannot run a
// guest); what must hold everywhere: the payload ran to its end under
// TCG, and the verdict says why.
func TestProbeKVMHere(t *testing.T) {
	requireQEMU(t)
	v, err := ProbeKVM(context.Background(), ProbeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("KVM verdict here: usable=%v in %s: %s", v.Usable, v.Took.Round(time.Millisecond), v.Reason)
	if v.Reason == "" || v.Key == "" {
		t.Errorf("verdict without a reason or key: %+v", v)
	}
	if _, err := os.Stat("/dev/kvm"); err != nil {
		if v.Usable || !strings.Contains(v.Reason, "no /dev/kvm") {
			t.Errorf("no /dev/kvm here, verdict %+v", v)
		}
		return
	}
	if v.TCGTime <= 0 {
		t.Errorf("the payload did not run under TCG: %+v", v)
	}
	if v.Usable && v.KVMTime <= 0 {
		t.Errorf("usable without a KVM run: %+v", v)
	}
}

// brokenKVMEnv tells the test binary, re-run by TestProbeKVMBrokenDevice
// in a mount namespace of its own, to probe behind a broken /dev/kvm.
const brokenKVMEnv = "VMPOD_TEST_BROKEN_KVM"

// TestProbeKVMBrokenDevice drives the failing path on any machine: in a
// private mount namespace /dev is a tmpfs with the few nodes QEMU needs and
// a /dev/kvm that is a character device with no driver behind it, so
// QEMU's KVM start fails. The probe must say KVM is unusable, and why.
func TestProbeKVMBrokenDevice(t *testing.T) {
	requireQEMU(t)
	if os.Getenv(brokenKVMEnv) != "" {
		probeBehindBrokenDevice(t)
		return
	}
	if os.Geteuid() != 0 {
		t.Fatal("needs root (a mount namespace with device nodes)")
	}
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--",
		os.Args[0], "-test.run=^TestProbeKVMBrokenDevice$", "-test.v")
	cmd.Env = append(os.Environ(), brokenKVMEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("probe in a private mount namespace: %v\n%s", err, out)
	}
	var v KVM
	found := false
	for sc := bufio.NewScanner(bytes.NewReader(out)); sc.Scan(); {
		if line, ok := strings.CutPrefix(sc.Text(), "VERDICT "); ok {
			if err := json.Unmarshal([]byte(line), &v); err != nil {
				t.Fatalf("verdict %q: %v", line, err)
			}
			found = true
		}
	}
	if !found {
		t.Fatalf("no verdict from the child:\n%s", out)
	}
	t.Logf("verdict: %+v", v)
	if v.Usable {
		t.Fatalf("KVM usable behind a /dev/kvm with no driver: %+v", v)
	}
	if !strings.Contains(v.Reason, "a guest under KVM failed: QEMU exited") {
		t.Errorf("reason %q does not say QEMU's KVM start failed", v.Reason)
	}
	if v.TCGTime <= 0 || v.KVMTime != 0 {
		t.Errorf("times: TCG %s (want > 0), KVM %s (want 0)", v.TCGTime, v.KVMTime)
	}
}

// probeBehindBrokenDevice runs in the child's private mount namespace.
func probeBehindBrokenDevice(t *testing.T) {
	if err := unix.Mount("tmpfs", "/dev", "tmpfs", unix.MS_NOSUID, "mode=0755"); err != nil {
		t.Fatalf("tmpfs on /dev: %v", err)
	}
	major, err := unusedCharMajor()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []struct {
		name         string
		major, minor uint32
	}{{"null", 1, 3}, {"zero", 1, 5}, {"random", 1, 8}, {"urandom", 1, 9}, {"kvm", major, 0}} {
		if err := unix.Mknod("/dev/"+n.name, unix.S_IFCHR|0o666, int(unix.Mkdev(n.major, n.minor))); err != nil {
			t.Fatalf("mknod /dev/%s: %v", n.name, err)
		}
	}
	v, err := ProbeKVM(context.Background(), ProbeOptions{Runs: 1})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(v)
	fmt.Printf("VERDICT %s\n", b)
}

// unusedCharMajor finds a character major number in the range Linux keeps
// for local use that no driver registered, so opening a node of it fails.
func unusedCharMajor() (uint32, error) {
	b, err := os.ReadFile("/proc/devices")
	if err != nil {
		return 0, err
	}
	used := map[uint32]bool{}
	char := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "Character devices"):
			char = true
		case strings.HasPrefix(line, "Block devices"):
			char = false
		case char:
			var m uint32
			if _, err := fmt.Sscanf(strings.TrimSpace(line), "%d", &m); err == nil {
				used[m] = true
			}
		}
	}
	for m := uint32(240); m <= 254; m++ {
		if !used[m] {
			return m, nil
		}
	}
	return 0, fmt.Errorf("no unused character major in 240-254")
}

// TestCheckKVMCache: a verdict is reused while its key holds and probed
// again when the key changes or the cache is bad. The device is absent, so
// each probe is quick and runs no QEMU.
func TestCheckKVMCache(t *testing.T) {
	requireQEMU(t)
	dir := t.TempDir()
	o := ProbeOptions{Device: filepath.Join(dir, "kvm"), CacheFile: filepath.Join(dir, "state", "kvm-probe.json")}
	ctx := context.Background()
	first, err := CheckKVM(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if first.Usable || !strings.Contains(first.Reason, "no "+o.Device) {
		t.Fatalf("first verdict %+v, want unusable for the missing device", first)
	}
	// A cached verdict comes back as written, probe time included.
	cached := first
	cached.Reason = "from the cache"
	if err := writeVerdict(o.CacheFile, cached); err != nil {
		t.Fatal(err)
	}
	if got, err := CheckKVM(ctx, o); err != nil || got.Reason != "from the cache" {
		t.Fatalf("second check = %+v, %v; want the cached verdict", got, err)
	}
	// Another key (another QEMU, kernel or device): probed again.
	cached.Key = "probe=0 something else"
	if err := writeVerdict(o.CacheFile, cached); err != nil {
		t.Fatal(err)
	}
	if got, err := CheckKVM(ctx, o); err != nil || got.Reason == "from the cache" || got.Key != first.Key {
		t.Fatalf("check after a key change = %+v, %v; want a new probe", got, err)
	}
	// A damaged cache is probed again, not trusted.
	if err := os.WriteFile(o.CacheFile, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := CheckKVM(ctx, o); err != nil || got.Key != first.Key {
		t.Fatalf("check after damage = %+v, %v", got, err)
	}
	if b, err := os.ReadFile(o.CacheFile); err != nil || !json.Valid(b) {
		t.Fatalf("cache not rewritten: %q, %v", b, err)
	}
}
