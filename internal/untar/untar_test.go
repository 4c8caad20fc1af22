package untar

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

type entry struct {
	name, link string
	typ        byte
	body       string
}

func tarOf(t *testing.T, entries ...entry) *bytes.Buffer {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644, Size: int64(len(e.body))}
		if e.typ == tar.TypeDir {
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &b
}

// TestUntarStaysInside: what an image names lands under dst, whatever
// ../ or symlinks it tries.
func TestUntarStaysInside(t *testing.T) {
	for name, entries := range map[string][]entry{
		"dotdot":          {{name: "../../escaped", typ: tar.TypeReg, body: "x"}},
		"absolute":        {{name: "/escaped", typ: tar.TypeReg, body: "x"}},
		"through symlink": {{name: "d", link: "../..", typ: tar.TypeSymlink}, {name: "d/escaped", typ: tar.TypeReg, body: "x"}},
		"absolute link":   {{name: "d", link: "/", typ: tar.TypeSymlink}, {name: "d/escaped", typ: tar.TypeReg, body: "x"}},
		"hard link out":   {{name: "escaped", link: "../../../etc/hostname", typ: tar.TypeLink}},
	} {
		t.Run(name, func(t *testing.T) {
			top := t.TempDir()
			dst := filepath.Join(top, "a", "rootfs")
			_ = Extract(tarOf(t, entries...), dst) // refusing is fine too
			for _, p := range []string{filepath.Join(top, "escaped"), filepath.Join(top, "a", "escaped"), "/escaped"} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s was written outside the rootfs", p)
				}
			}
		})
	}
}

func TestUntarDiskImage(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "rootfs")
	err := Extract(tarOf(t,
		entry{name: "disk/", typ: tar.TypeDir},
		entry{name: "disk/guest.qcow2", typ: tar.TypeReg, body: "QFI"},
		entry{name: "boot/vmlinuz", typ: tar.TypeReg, body: "kernel"},
	), dst)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"disk/guest.qcow2": "QFI", "boot/vmlinuz": "kernel"} {
		if b, err := os.ReadFile(filepath.Join(dst, p)); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", p, b, err, want)
		}
	}
}
