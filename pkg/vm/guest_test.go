package vm_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/vmpod/vmpod/internal/testguest"
	"github.com/vmpod/vmpod/pkg/jail"
	"github.com/vmpod/vmpod/pkg/node/embedded"
)

var unpacked struct {
	once   sync.Once
	rootfs string
	err    error
}

// containerdiskRootfs unpacks the test guest's containerdisk once per test
// binary and returns its root filesystem.
func containerdiskRootfs(t testing.TB) string {
	t.Helper()
	archive := testguest.Archive(t)
	unpacked.once.Do(func() {
		var tmp string
		tmp, unpacked.err = os.MkdirTemp("", "vmpod-containerdisk-")
		if unpacked.err != nil {
			return
		}
		cleanupAtExit(func() { os.RemoveAll(tmp) })
		unpacked.rootfs = tmp + "/rootfs"
		unpacked.err = testguest.Unpack(archive, unpacked.rootfs)
	})
	if unpacked.err != nil {
		t.Fatal(unpacked.err)
	}
	return unpacked.rootfs
}

var atExit []func()

// capsProbeEnv and capsProbeJailerEnv make the test binary the probe of
// runtimeForTest (the capabilities cache dir to fill, the jailer).
const (
	capsProbeEnv       = "VMPOD_TEST_CAPS_PROBE"
	capsProbeJailerEnv = "VMPOD_TEST_CAPS_PROBE_JAILER"
)

// qmpLog is libvirt's log of the QMP commands it sends ("" when the user
// set libvirt's log).
var qmpLog string

// qmpCommands counts, by name, the QMP commands libvirt sent to the QEMU
// of domain name (its monitor's lines name the VM) since the log was
// size from bytes long.
func qmpCommands(t *testing.T, from int64) map[string]int {
	t.Helper()
	data, err := os.ReadFile(qmpLog)
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, line := range strings.Split(string(data[min(from, int64(len(data))):]), "\n") {
		_, cmd, ok := strings.Cut(line, `QEMU_MONITOR_SEND_MSG: `)
		if !ok {
			continue
		}
		if _, rest, ok := strings.Cut(cmd, `"execute":"`); ok {
			name, _, _ := strings.Cut(rest, `"`)
			n[name]++
		}
	}
	return n
}

func cleanupAtExit(f func()) { atExit = append(atExit, f) }

func TestMain(m *testing.M) {
	// libvirt starts this binary, through the jailer link, as the domain's
	// emulator: it is the jailer then, as vm-runtime is.
	if filepath.Base(os.Args[0]) == jail.EmulatorName {
		os.Exit(jail.Main(os.Args[1:]))
	}
	// runtimeForTest's probe of QEMU's capabilities.
	if dir := os.Getenv(capsProbeEnv); dir != "" {
		if err := embedded.Probe(context.Background(), dir, os.Getenv(capsProbeJailerEnv)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// libvirt's QMP exchanges (its monitor's sends, at info), for the
	// tests that count them; libvirt reads this at its first connection.
	if os.Getenv("LIBVIRT_LOG_FILTERS") == "" && os.Getenv("LIBVIRT_LOG_OUTPUTS") == "" {
		if dir, err := os.MkdirTemp("", "vmpod-vm-libvirt-log-"); err == nil {
			cleanupAtExit(func() { os.RemoveAll(dir) })
			qmpLog = filepath.Join(dir, "libvirt.log")
			os.Setenv("LIBVIRT_LOG_FILTERS", "2:qemu.qemu_monitor")
			os.Setenv("LIBVIRT_LOG_OUTPUTS", "2:file:"+qmpLog)
		}
	}
	code := m.Run()
	for _, f := range atExit {
		f()
	}
	os.Exit(code)
}
