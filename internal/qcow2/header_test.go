package qcow2

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// qemuImg makes an image with the real qemu-img and returns its header's
// bytes.
func qemuImg(t *testing.T, args ...string) []byte {
	t.Helper()
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Fatalf("qemu-img (Debian's qemu-utils, which make deps installs): %v", err)
	}
	dir := t.TempDir()
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "DIR", dir)
	}
	if out, err := exec.Command("qemu-img", args...).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img %v: %v: %s", args, err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "x.qcow2"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHeaders: the headers qemu-img writes, each read and checked as
// vmpod's intake would.
func TestHeaders(t *testing.T) {
	const maxSize = 4 << 40
	for _, tc := range []struct {
		name     string
		args     []string
		version  uint32
		size     uint64
		refused  string // in Check's error; "": accepted
		dataFile string // DataFileName's suffix; "" for none
	}{
		{"plain", []string{"create", "-f", "qcow2", "DIR/x.qcow2", "64M"}, 3, 64 << 20, "", ""},
		{"compat 0.10", []string{"create", "-f", "qcow2", "-o", "compat=0.10", "DIR/x.qcow2", "1G"}, 2, 1 << 30, "", ""},
		{"64 KiB clusters, lazy refcounts, zstd, extended L2", []string{"create", "-f", "qcow2", "-o",
			"cluster_size=65536,lazy_refcounts=on,compression_type=zstd,extended_l2=on", "DIR/x.qcow2", "2G"}, 3, 2 << 30, "", ""},
		{"a backing file", []string{"create", "-f", "qcow2", "-u", "-b", "/etc/shadow", "-F", "raw", "DIR/x.qcow2", "1M"}, 3, 1 << 20, "backing file", ""},
		{"an external data file", []string{"create", "-f", "qcow2", "-o", "data_file=DIR/data.raw", "DIR/x.qcow2", "1M"}, 3, 1 << 20, "external data file", "/data.raw"},
		{"above the maximum", []string{"create", "-f", "qcow2", "DIR/x.qcow2", "5T"}, 3, 5 << 40, "above the maximum", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := qemuImg(t, tc.args...)
			h, err := ReadHeader(bytes.NewReader(b))
			if err != nil {
				t.Fatalf("ReadHeader: %v", err)
			}
			if h.Version != tc.version || h.Size != tc.size {
				t.Errorf("version %d, size %d; want %d, %d", h.Version, h.Size, tc.version, tc.size)
			}
			if name := DataFileName(bytes.NewReader(b), h); tc.dataFile != "" && !strings.HasSuffix(name, tc.dataFile) || tc.dataFile == "" && name != "" {
				t.Errorf("DataFileName = %q, want one ending in %q", name, tc.dataFile)
			}
			err = h.Check(maxSize)
			switch {
			case tc.refused == "" && err != nil:
				t.Errorf("Check: %v; want it accepted", err)
			case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
				t.Errorf("Check: %v; want a refusal saying %q", err, tc.refused)
			}
		})
	}
}

// TestHeaderBits: the corrupt flag and an unknown incompatible feature,
// set in a header qemu-img wrote, are refused; so are broken headers.
func TestHeaderBits(t *testing.T) {
	good := qemuImg(t, "create", "-f", "qcow2", "DIR/x.qcow2", "1M")
	set := func(off int, v uint64, width int) []byte {
		b := bytes.Clone(good)
		switch width {
		case 4:
			binary.BigEndian.PutUint32(b[off:], uint32(v))
		case 8:
			binary.BigEndian.PutUint64(b[off:], v)
		}
		return b
	}
	for name, tc := range map[string]struct {
		b       []byte
		readErr string // from ReadHeader
		refused string // from Check
	}{
		"corrupt": {b: set(72, IncompatCorrupt, 8), refused: "corrupt"},
		// LUKS (crypt_method 2), set by hand: qemu-img's LUKS create
		// times its key derivation and fails on a loaded machine.
		"encrypted":          {b: set(32, 2, 4), refused: "encrypted (crypt_method 2)"},
		"an unknown feature": {b: set(72, 1<<20, 8), refused: "unknown bits 0x100000"},
		"version 4":          {b: set(4, 4, 4), readErr: "version 4"},
		"cluster_bits 30":    {b: set(20, 30, 4), readErr: "cluster_bits 30"},
		"header_length 100":  {b: set(100, 100, 4), readErr: "header_length 100"},
		"size 0":             {b: set(24, 0, 8), refused: "virtual size 0"},
		"truncated":          {b: good[:80], readErr: "shorter than its 104"},
		"too short":          {b: good[:40], readErr: "shorter than the 72"},
		"raw":                {b: make([]byte, 4096), readErr: "not a qcow2"},
	} {
		t.Run(name, func(t *testing.T) {
			h, err := ReadHeader(bytes.NewReader(tc.b))
			if tc.readErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.readErr) {
					t.Fatalf("ReadHeader: %v; want an error saying %q", err, tc.readErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ReadHeader: %v", err)
			}
			if err := h.Check(4 << 40); err == nil || !strings.Contains(err.Error(), tc.refused) {
				t.Errorf("Check: %v; want a refusal saying %q", err, tc.refused)
			}
		})
	}
	if _, err := ReadHeader(bytes.NewReader(nil)); !errors.Is(err, ErrNotQcow2) {
		t.Errorf("an empty file: %v, want ErrNotQcow2", err)
	}
}
