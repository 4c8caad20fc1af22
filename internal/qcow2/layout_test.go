package qcow2

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// qemuImgFile runs qemu-img (and qemu-io) commands over DIR/x.qcow2 and
// returns the whole file.
func qemuImgFile(t *testing.T, cmds ...[]string) []byte {
	t.Helper()
	dir := t.TempDir()
	for _, c := range cmds {
		args := make([]string, len(c)-1)
		for i, a := range c[1:] {
			args[i] = strings.ReplaceAll(a, "DIR", dir)
		}
		run(t, c[0], args...)
	}
	b, err := os.ReadFile(filepath.Join(dir, "x.qcow2"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCheckLayoutAccepts: the images qemu-img writes, fresh, written to
// and with a snapshot, pass CheckLayout.
func TestCheckLayoutAccepts(t *testing.T) {
	create := func(args ...string) []string {
		return append([]string{"qemu-img", "create", "-q", "-f", "qcow2"}, args...)
	}
	for name, cmds := range map[string][][]string{
		"plain":                  {create("DIR/x.qcow2", "64M")},
		"compat 0.10":            {create("-o", "compat=0.10", "DIR/x.qcow2", "1G")},
		"512-byte clusters":      {create("-o", "cluster_size=512", "DIR/x.qcow2", "1G")},
		"2 MiB clusters":         {create("-o", "cluster_size=2M", "DIR/x.qcow2", "1T")},
		"extended L2, zstd":      {create("-o", "extended_l2=on,compression_type=zstd,lazy_refcounts=on", "DIR/x.qcow2", "3G")},
		"8 TiB, two L1 clusters": {create("DIR/x.qcow2", "8T")},
		"a backing file":         {create("-u", "-b", "/b.raw", "-F", "raw", "DIR/x.qcow2", "1G")},
		"written, with a snapshot": {
			create("DIR/x.qcow2", "1G"),
			{"qemu-io", "-f", "qcow2", "-c", "write -P 1 0 1M", "-c", "write -P 2 512M 64k", "DIR/x.qcow2"},
			{"qemu-img", "snapshot", "-c", "s1", "DIR/x.qcow2"},
			{"qemu-io", "-f", "qcow2", "-c", "write -P 3 0 64k", "DIR/x.qcow2"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			b := qemuImgFile(t, cmds...)
			h, err := ReadHeader(bytes.NewReader(b))
			if err != nil {
				t.Fatalf("ReadHeader: %v", err)
			}
			if err := h.CheckLayout(int64(len(b))); err != nil {
				t.Errorf("CheckLayout: %v", err)
			}
		})
	}
}

// TestCheckLayoutRefuses: fields of a header qemu-img wrote, set to what
// QEMU refuses to open (or to tables that end past the file), are refused
// with the field named.
func TestCheckLayoutRefuses(t *testing.T) {
	good := qemuImgFile(t, []string{"qemu-img", "create", "-q", "-f", "qcow2", "-u", "-b", "/b.raw", "-F", "raw", "DIR/x.qcow2", "1M"})
	set := func(off int, v uint64, width int) []byte {
		b := bytes.Clone(good)
		switch width {
		case 1:
			b[off] = byte(v)
		case 4:
			binary.BigEndian.PutUint32(b[off:], uint32(v))
		case 8:
			binary.BigEndian.PutUint64(b[off:], v)
		}
		return b
	}
	const (
		l1Size, l1Offset, refOffset, refClusters, nbSnapshots, snapOffset = 36, 40, 48, 56, 60, 64
		backingOffset, backingSize, incompat, refcountOrder, headerLength = 8, 16, 72, 96, 100
	)
	extL2 := set(20, 13, 4)
	binary.BigEndian.PutUint64(extL2[incompat:], IncompatExtendedL2)
	for name, tc := range map[string]struct {
		b    []byte
		want string
	}{
		"l1_table_offset unaligned":        {set(l1Offset, 0x30200, 8), "l1_table_offset 0x30200: not a multiple of the cluster size"},
		"l1_table_offset 0":                {set(l1Offset, 0, 8), "l1_table_offset 0 with l1_size 1: the table would lie over the header"},
		"l1_table_offset past the end":     {set(l1Offset, 0x40000, 8), "l1_table_offset 0x40000 with l1_size 1: the table (8 bytes) ends past the file's end"},
		"l1_table_offset near 2^64":        {set(l1Offset, 1<<63, 8), "l1_table_offset 0x8000000000000000 with l1_size 1: the table ends past 2^63"},
		"l1_size 0":                        {set(l1Size, 0, 4), "l1_size 0: maps 0 bytes, less than the virtual size 1048576"},
		"l1_size above 32 MiB":             {set(l1Size, 4<<20+1, 4), "l1_size 4194305: above QEMU's limit of 4194304"},
		"a virtual size l1_size misses":    {set(24, 1<<29+512, 8), "l1_size 1: maps 536870912 bytes, less than the virtual size 536871424"},
		"a virtual size no L1 maps":        {set(24, 1<<62, 8), "size 4611686018427387904: needs 8589934592 L1 entries"},
		"refcount_table_offset unaligned":  {set(refOffset, 0x10008, 8), "refcount_table_offset 0x10008: not a multiple"},
		"refcount_table_offset 0":          {set(refOffset, 0, 8), "refcount_table_offset 0 with refcount_table_clusters 1: the table would lie over the header"},
		"refcount_table_clusters 0":        {set(refClusters, 0, 4), "refcount_table_clusters 0"},
		"refcount_table_clusters 129":      {set(refClusters, 129, 4), "refcount_table_clusters 129: above QEMU's limit of 128"},
		"refcount_table_clusters past end": {set(refClusters, 3, 4), "refcount_table_offset 0x10000 with refcount_table_clusters 3: the table (196608 bytes) ends past the file's end at 196616"},
		"nb_snapshots 65537":               {set(nbSnapshots, 65537, 4), "nb_snapshots 65537: above QEMU's limit of 65536"},
		"nb_snapshots without a table":     {set(nbSnapshots, 1, 4), "snapshots_offset 0 with nb_snapshots 1: the table would lie over the header"},
		"snapshots_offset unaligned":       {set(snapOffset, 0x123, 8), "snapshots_offset 0x123: not a multiple"},
		"refcount_order 7":                 {set(refcountOrder, 7, 4), "refcount_order 7: want at most 6"},
		"compression_type 2":               {set(104, 2, 1), "compression_type 2: want 0 (zlib) or 1 (zstd)"},
		"zstd without its bit":             {set(104, 1, 1), "compression_type 1 without incompatible feature bit 3"},
		"the bit without zstd":             {set(incompat, IncompatCompression, 8), "compression_type 0 (zlib) with incompatible feature bit 3"},
		"extended L2, 8 KiB clusters":      {extL2, "cluster_bits 13 with extended L2 entries"},
		"header_length above the cluster":  {set(headerLength, 65544, 4), "header_length 65544: above the cluster size 65536"},
		"backing_file_offset past cluster": {set(backingOffset, 65537, 8), "backing_file_offset 65537: past the header's cluster"},
		"backing_file_size 1024":           {set(backingSize, 1024, 4), "backing_file_size 1024 at backing_file_offset 528: longer than 1023 bytes"},
		"backing name past the cluster":    {set(backingOffset, 65531, 8), "backing_file_size 6 at backing_file_offset 65531"},
		"truncated":                        {good[:0x18000], "refcount_table_offset 0x10000 with refcount_table_clusters 1: the table (65536 bytes) ends past the file's end at 98304"},
		"truncated before the L1 table":    {good[:3<<16], "l1_table_offset 0x30000 with l1_size 1: the table (8 bytes) ends past the file's end at 196608"},
	} {
		t.Run(name, func(t *testing.T) {
			h, err := ReadHeader(bytes.NewReader(tc.b))
			if err != nil {
				t.Fatalf("ReadHeader: %v", err)
			}
			if err := h.CheckLayout(int64(len(tc.b))); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("CheckLayout: %v; want an error saying %q", err, tc.want)
			}
		})
	}

	h, err := ReadHeader(bytes.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	h.ClusterBits = 8 // not from ReadHeader, which refuses it
	if err := h.CheckLayout(int64(len(good))); err == nil || !strings.Contains(err.Error(), "cluster_bits 8") {
		t.Errorf("CheckLayout of cluster_bits 8: %v", err)
	}
}

// TestReadHeaderFields: ReadHeader reads every field of the fixed header.
func TestReadHeaderFields(t *testing.T) {
	b := qemuImgFile(t, []string{"qemu-img", "create", "-q", "-f", "qcow2", "-o", "compression_type=zstd,lazy_refcounts=on", "DIR/x.qcow2", "8T"})
	h, err := ReadHeader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	want := Header{
		Version: 3, ClusterBits: 16, Size: 8 << 40,
		L1Size: 16384, L1TableOffset: 3 << 16, RefcountTableOffset: 1 << 16, RefcountTableClusters: 1,
		IncompatFeatures: IncompatCompression, CompatFeatures: CompatLazyRefcounts,
		RefcountOrder: 4, HeaderLength: 112, CompressionType: 1,
	}
	if h != want {
		t.Errorf("ReadHeader:\n%+v\nwant\n%+v", h, want)
	}
	if _, err := ReadHeader(bytes.NewReader(b[:104])); err == nil || !strings.Contains(err.Error(), "header_length 112 in 104 bytes") {
		t.Errorf("ReadHeader of 104 bytes of a 112-byte header: %v", err)
	}
}
