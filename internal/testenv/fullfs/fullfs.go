// Package fullfs gives a test a small file system of its own to fill, so
// that a full (or read-only) state dir is tried without touching the
// host's disk. Tests only; it needs root, as make test runs.
//
// fullfs imports golang.org/x/sys and the standard library.
package fullfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Mount mounts a tmpfs of size bytes on a new dir, unmounted when the
// test ends, and returns the dir.
func Mount(t testing.TB, size int) string {
	t.Helper()
	return mountAt(t, t.TempDir(), size)
}

// MountIn is Mount with the dir made in parent (a short path, for unix
// sockets below it), removed when the test ends.
func MountIn(t testing.TB, parent string, size int) string {
	t.Helper()
	dir, err := os.MkdirTemp(parent, "full-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	return mountAt(t, dir, size)
}

func mountAt(t testing.TB, dir string, size int) string {
	t.Helper()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Fatalf("tmpfs on %s (the test needs root): %v", dir, err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// Fill writes a file in dir until its file system is full, and returns
// the file's path.
func Fill(t testing.TB, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("filling %s: %v", dir, err)
			}
			return p
		}
	}
}
