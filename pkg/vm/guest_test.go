package vm_test

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/vmpod/vmpod/internal/testguest"
	"github.com/vmpod/vmpod/pkg/jail"
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

func cleanupAtExit(f func()) { atExit = append(atExit, f) }

func TestMain(m *testing.M) {
	// libvirt starts this binary, through the jailer link, as the domain's
	// emulator: it is the jailer then, as vm-runtime is.
	if filepath.Base(os.Args[0]) == jail.EmulatorName {
		os.Exit(jail.Main(os.Args[1:]))
	}
	code := m.Run()
	for _, f := range atExit {
		f()
	}
	os.Exit(code)
}
