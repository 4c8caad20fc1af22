package qcow2

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// run runs a QEMU tool and returns its output; it fails the test when the
// tool fails.
func run(t testing.TB, name string, args ...string) []byte {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// byteIdentical says whether this qemu-img is the one WriteOverlay copies
// byte for byte, 7.2: another may write other header extensions or lay the
// tables out otherwise, and then only what qemu-img info reports is
// compared.
func byteIdentical(t *testing.T) bool {
	t.Helper()
	out := run(t, "qemu-img", "--version")
	m := regexp.MustCompile(`version (\d+)\.(\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("qemu-img --version: no version in %q", out)
	}
	return string(m[1]) == "7" && string(m[2]) == "2"
}

// imageInfo is what `qemu-img info --output=json` reports that an overlay
// decides.
type imageInfo struct {
	VirtualSize     uint64 `json:"virtual-size"`
	ClusterSize     int    `json:"cluster-size"`
	BackingFilename string `json:"backing-filename"`
	BackingFormat   string `json:"backing-filename-format"`
	DirtyFlag       bool   `json:"dirty-flag"`
	FormatSpecific  struct {
		Data struct {
			Compat          string `json:"compat"`
			RefcountBits    int    `json:"refcount-bits"`
			LazyRefcounts   bool   `json:"lazy-refcounts"`
			Corrupt         bool   `json:"corrupt"`
			CompressionType string `json:"compression-type"`
			ExtendedL2      bool   `json:"extended-l2"`
		} `json:"data"`
	} `json:"format-specific"`
}

func info(t *testing.T, path string) imageInfo {
	t.Helper()
	var i imageInfo
	if err := json.Unmarshal(run(t, "qemu-img", "info", "--output=json", path), &i); err != nil {
		t.Fatalf("qemu-img info %s: %v", path, err)
	}
	return i
}

// writeOverlay writes an overlay file with WriteOverlay.
func writeOverlay(t testing.TB, path, backingFile, backingFormat string, size uint64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := WriteOverlay(f, backingFile, backingFormat, size); err != nil {
		t.Fatalf("WriteOverlay: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// makeBacking makes a 1 MiB backing image of the format in dir/name and
// returns its path.
func makeBacking(t *testing.T, dir, name, format string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	switch format {
	case "raw":
		if err := os.WriteFile(path, bytes.Repeat([]byte{0xcd}, 1<<20), 0o644); err != nil {
			t.Fatal(err)
		}
	case "qcow2":
		run(t, "qemu-img", "create", "-q", "-f", "qcow2", path, "1M")
		run(t, "qemu-io", "-f", "qcow2", "-c", "write -q -P 0xcd 0 1M", path)
	}
	return path
}

// TestOverlay: WriteOverlay's image is qemu-img create's (byte for byte
// with qemu-img 7.2), qemu-img check finds nothing wrong in it, and this
// package reads it back, for sizes whose L1 table is 8 bytes, a cluster,
// two clusters and 25, over both backing formats.
func TestOverlay(t *testing.T) {
	identical := byteIdentical(t)
	if !identical {
		t.Logf("qemu-img %s is not 7.2: comparing what qemu-img info reports, not bytes", bytes.TrimSpace(run(t, "qemu-img", "--version")))
	}
	longName := strings.Repeat("d/", maxBackingName/2) + "b" // 1023 bytes, relative to the overlay
	for _, tc := range []struct {
		size    uint64
		backing string // relative to the test's directory; "": an absolute path
	}{
		{size: 512},
		{size: 1 << 20},
		{size: 64 << 20},
		{size: 10<<30 + 512},
		{size: 100 << 30},
		{size: 2 << 40},
		{size: 4 << 40}, // L1: exactly one cluster
		{size: 8 << 40}, // L1: two clusters
		{size: 100 << 40},
		{size: 1 << 30, backing: longName},
	} {
		for _, format := range []string{"raw", "qcow2"} {
			name := fmt.Sprintf("%d %s", tc.size, format)
			if tc.backing != "" {
				name += fmt.Sprintf(" %d-byte relative name", len(tc.backing))
			}
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				backing := tc.backing
				if backing == "" {
					backing = makeBacking(t, dir, "base."+format, format)
				} else {
					makeBacking(t, dir, backing, format)
				}
				goImg, qemuImg := filepath.Join(dir, "go.qcow2"), filepath.Join(dir, "qemu.qcow2")
				writeOverlay(t, goImg, backing, format, tc.size)
				run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-u", "-b", backing, "-F", format, qemuImg, strconv.FormatUint(tc.size, 10))
				run(t, "qemu-img", "check", "-q", goImg)

				got, want := info(t, goImg), info(t, qemuImg)
				if got != want {
					t.Errorf("qemu-img info of WriteOverlay's image:\n%+v\nof qemu-img create's:\n%+v", got, want)
				}
				if got.VirtualSize != tc.size || got.ClusterSize != 65536 || got.BackingFilename != backing || got.BackingFormat != format ||
					got.FormatSpecific.Data.Compat != "1.1" || got.FormatSpecific.Data.RefcountBits != 16 || got.FormatSpecific.Data.LazyRefcounts ||
					got.FormatSpecific.Data.Corrupt || got.FormatSpecific.Data.CompressionType != "zlib" || got.DirtyFlag {
					t.Errorf("qemu-img info: %+v; want size %d, 64 KiB clusters, backing %s (%s), compat 1.1, 16-bit refcounts, zlib, clean", got, tc.size, backing, format)
				}

				g, err := os.ReadFile(goImg)
				if err != nil {
					t.Fatal(err)
				}
				q, err := os.ReadFile(qemuImg)
				if err != nil {
					t.Fatal(err)
				}
				if identical && !bytes.Equal(g, q) {
					t.Errorf("WriteOverlay's image (%d bytes) differs from qemu-img's (%d bytes) first at byte %#x", len(g), len(q), firstDiff(g, q))
				}

				h, err := ReadHeader(bytes.NewReader(g))
				if err != nil {
					t.Fatalf("ReadHeader: %v", err)
				}
				if err := h.CheckLayout(int64(len(g))); err != nil {
					t.Errorf("CheckLayout: %v", err)
				}
				if err := h.Check(MaxOverlaySize); err == nil || !strings.Contains(err.Error(), "backing file") {
					t.Errorf("Check: %v; want the backing file refused", err)
				}
			})
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestOverlayLargest: the largest size QEMU takes for 64 KiB clusters,
// a 32 MiB L1 table; qemu-img create refuses 512 bytes more.
func TestOverlayLargest(t *testing.T) {
	dir := t.TempDir()
	goImg, qemuImg := filepath.Join(dir, "go.qcow2"), filepath.Join(dir, "qemu.qcow2")
	writeOverlay(t, goImg, "/base.raw", "raw", MaxOverlaySize)
	run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-u", "-b", "/base.raw", "-F", "raw", qemuImg, strconv.FormatUint(MaxOverlaySize, 10))
	if got, want := info(t, goImg), info(t, qemuImg); got != want {
		t.Errorf("qemu-img info of WriteOverlay's image:\n%+v\nof qemu-img create's:\n%+v", got, want)
	}
	if byteIdentical(t) {
		g, _ := os.ReadFile(goImg)
		q, _ := os.ReadFile(qemuImg)
		if !bytes.Equal(g, q) {
			t.Errorf("WriteOverlay's image (%d bytes) differs from qemu-img's (%d bytes) first at byte %#x", len(g), len(q), firstDiff(g, q))
		}
	}
	out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-u", "-b", "/base.raw", "-F", "raw", qemuImg, strconv.FormatUint(MaxOverlaySize+512, 10)).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "too large") {
		t.Errorf("qemu-img create of MaxOverlaySize+512: %v, %s; want it refused as too large", err, out)
	}
}

// TestOverlayRefused: what WriteOverlay refuses, with the argument named
// and nothing written.
func TestOverlayRefused(t *testing.T) {
	for name, tc := range map[string]struct {
		backing, format string
		size            uint64
		want            string
	}{
		"size 0":                   {"/b", "raw", 0, "size 0"},
		"size not a multiple":      {"/b", "raw", 1000, "size 1000: not a multiple of 512 (qemu-img would round it up to 1024)"},
		"size above the maximum":   {"/b", "raw", MaxOverlaySize + 512, "size 2251799813685760: above"},
		"no backing file":          {"", "raw", 1 << 20, "backingFile empty"},
		"a 1024-byte backing file": {strings.Repeat("b", 1024), "raw", 1 << 20, "backingFile 1024 bytes long"},
		"a NUL in the name":        {"/b\x00c", "raw", 1 << 20, "holds a NUL"},
		"format vmdk":              {"/b", "vmdk", 1 << 20, `backingFormat "vmdk": want "raw" or "qcow2"`},
		"no format":                {"/b", "", 1 << 20, `backingFormat "": want "raw" or "qcow2"`},
	} {
		t.Run(name, func(t *testing.T) {
			var m memFile
			err := WriteOverlay(&m, tc.backing, tc.format, tc.size)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("WriteOverlay: %v; want an error saying %q", err, tc.want)
			}
			if len(m) != 0 {
				t.Errorf("WriteOverlay wrote %d bytes before refusing", len(m))
			}
		})
	}
}

// memFile is a file in memory.
type memFile []byte

func (m *memFile) WriteAt(p []byte, off int64) (int, error) {
	if end := int(off) + len(p); end > len(*m) {
		*m = append(*m, make([]byte, end-len(*m))...)
	}
	return copy((*m)[off:], p), nil
}

// TestOverlayIO: QEMU writes through WriteOverlay's image into the
// overlay, and reads what it did not write from the backing file, zeroes
// past the backing file's end; the backing file stays as it was.
func TestOverlayIO(t *testing.T) {
	for _, format := range []string{"raw", "qcow2"} {
		t.Run(format, func(t *testing.T) {
			dir := t.TempDir()
			backing := makeBacking(t, dir, "base."+format, format) // 1 MiB of 0xcd
			overlay := filepath.Join(dir, "overlay.qcow2")
			writeOverlay(t, overlay, backing, format, 2<<20)

			run(t, "qemu-io", "-f", "qcow2", "-c", "write -P 0xab 0 64k", overlay)
			out := run(t, "qemu-io", "-f", "qcow2", "-r",
				"-c", "read -P 0xab 0 64k", // written
				"-c", "read -P 0xcd 64k 960k", // the backing file's
				"-c", "read -P 0 1M 1M", // past the backing file's end
				overlay)
			if bytes.Contains(out, []byte("failed")) {
				t.Errorf("qemu-io read: %s", out)
			}
			run(t, "qemu-img", "check", "-q", overlay)
			if out := run(t, "qemu-io", "-f", format, "-r", "-c", "read -P 0xcd 0 1M", backing); bytes.Contains(out, []byte("failed")) {
				t.Errorf("the backing file changed: %s", out)
			}

			b, err := os.ReadFile(overlay)
			if err != nil {
				t.Fatal(err)
			}
			h, err := ReadHeader(bytes.NewReader(b))
			if err != nil {
				t.Fatalf("ReadHeader of the written overlay: %v", err)
			}
			if err := h.CheckLayout(int64(len(b))); err != nil {
				t.Errorf("CheckLayout of the written overlay: %v", err)
			}
		})
	}
}

// BenchmarkOverlay: a 10 GiB overlay written by WriteOverlay, with and
// without an fsync (qemu-img create calls fdatasync five times), and by
// qemu-img create, each over the file the previous one wrote; and by
// WriteOverlay to memory, its own cost without the file system's.
func BenchmarkOverlay(b *testing.B) {
	const size = 10 << 30
	dir := b.TempDir()
	path := filepath.Join(dir, "overlay.qcow2")
	b.Run("WriteOverlay to memory", func(b *testing.B) {
		for b.Loop() {
			var m memFile
			if err := WriteOverlay(&m, "/var/lib/vmpod/base.raw", "raw", size); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, sync := range []bool{false, true} {
		name := "WriteOverlay"
		if sync {
			name += "+fsync"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				f, err := os.Create(path)
				if err != nil {
					b.Fatal(err)
				}
				if err := WriteOverlay(f, "/var/lib/vmpod/base.raw", "raw", size); err != nil {
					b.Fatal(err)
				}
				if sync {
					if err := f.Sync(); err != nil {
						b.Fatal(err)
					}
				}
				if err := f.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("qemu-img create", func(b *testing.B) {
		for b.Loop() {
			run(b, "qemu-img", "create", "-q", "-f", "qcow2", "-u", "-b", "/var/lib/vmpod/base.raw", "-F", "raw", path, strconv.Itoa(size))
		}
	})
}
