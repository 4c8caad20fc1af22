package libvirt

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMaskCaps: maskCaps takes the one flag out of each cache entry and
// leaves every other byte, and a second pass changes nothing.
func TestMaskCaps(t *testing.T) {
	dir := t.TempDir()
	entry := "<qemuCaps>\n  <emulator>/usr/bin/qemu-system-x86_64</emulator>\n  <flag name='x86-max-cpu'/>\n" +
		"  " + maskedCapsFlag + "\n  <flag name='canonical-cpu-features'/>\n</qemuCaps>\n"
	want := "<qemuCaps>\n  <emulator>/usr/bin/qemu-system-x86_64</emulator>\n  <flag name='x86-max-cpu'/>\n" +
		"  <flag name='canonical-cpu-features'/>\n</qemuCaps>\n"
	clean := "<qemuCaps>\n  <flag name='cpu-unavailable-features-not'/>\n</qemuCaps>\n"
	files := map[string]string{"a.xml": entry, "b.xml": clean, "notes.txt": entry}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	changed, err := maskCaps(dir)
	if err != nil || !changed {
		t.Fatalf("maskCaps = %v, %v; want a change", changed, err)
	}
	for name, want := range map[string]string{"a.xml": want, "b.xml": clean, "notes.txt": entry} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s after maskCaps:\n%s\nwant:\n%s", name, got, want)
		}
	}
	if changed, err := maskCaps(dir); err != nil || changed {
		t.Errorf("second maskCaps = %v, %v; want no change", changed, err)
	}
	if changed, err := maskCaps(filepath.Join(dir, "none")); err != nil || changed {
		t.Errorf("maskCaps of a missing dir = %v, %v; want nothing", changed, err)
	}
}

// TestAlignModuleTimes: a storage-file module newer than the QEMU module
// (installed after it) makes the QEMU module's ctime move up to it, its
// content and mtime kept; a cache entry is stale exactly when it was
// probed with another QEMU module ctime than the one there now.
func TestAlignModuleTimes(t *testing.T) {
	qemuDir, storageDir := t.TempDir(), t.TempDir()
	t.Setenv("LIBVIRT_DRIVER_DIR", qemuDir)
	t.Setenv("LIBVIRT_STORAGE_FILE_DIR", storageDir)
	qemu, storage := filepath.Join(qemuDir, qemuModule), filepath.Join(storageDir, storageFileModule)
	if err := os.WriteFile(qemu, []byte("qemu"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := os.Chtimes(qemu, old, old); err != nil {
		t.Fatal(err)
	}
	var q, s unix.Stat_t
	stat := func(p string, st *unix.Stat_t) {
		t.Helper()
		if err := unix.Stat(p, st); err != nil {
			t.Fatal(err)
		}
	}
	stat(qemu, &q)
	before := fmt.Sprintf("<qemuCaps>\n  <selfctime>%d</selfctime>\n</qemuCaps>\n", q.Ctim.Sec)
	if staleEntry([]byte(before)) {
		t.Errorf("an entry probed with the QEMU module's ctime %d is stale", q.Ctim.Sec)
	}
	// ctime has a resolution of seconds in libvirt's bookkeeping: the
	// storage module must be a second newer to count.
	time.Sleep(time.Until(time.Unix(q.Ctim.Sec+1, 0).Add(50 * time.Millisecond)))
	if err := os.WriteFile(storage, []byte("storage"), 0o644); err != nil {
		t.Fatal(err)
	}
	stat(storage, &s)
	if s.Ctim.Sec <= q.Ctim.Sec {
		t.Fatalf("storage module ctime %d not after QEMU module's %d", s.Ctim.Sec, q.Ctim.Sec)
	}

	alignModuleTimes()
	var q2 unix.Stat_t
	stat(qemu, &q2)
	if q2.Ctim.Sec < s.Ctim.Sec {
		t.Errorf("QEMU module ctime %d, still before the storage module's %d", q2.Ctim.Sec, s.Ctim.Sec)
	}
	if q2.Mtim != q.Mtim {
		t.Errorf("QEMU module mtime %v, want it kept at %v", q2.Mtim, q.Mtim)
	}
	if got, _ := os.ReadFile(qemu); string(got) != "qemu" {
		t.Errorf("QEMU module content %q changed", got)
	}
	if !staleEntry([]byte(before)) {
		t.Errorf("an entry probed with the old ctime %d is not stale after the move to %d", q.Ctim.Sec, q2.Ctim.Sec)
	}
	if staleEntry([]byte("<qemuCaps/>")) {
		t.Error("an entry without selfctime is stale: libvirt decides those")
	}

	// Nothing to do when the QEMU module is the newer.
	alignModuleTimes()
	var q3 unix.Stat_t
	stat(qemu, &q3)
	if q3.Ctim != q2.Ctim {
		t.Errorf("a second align moved the QEMU module's ctime from %v to %v", q2.Ctim, q3.Ctim)
	}
}
