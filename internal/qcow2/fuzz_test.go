package qcow2

import (
	"bytes"
	"testing"
)

// FuzzReadHeader: any bytes a pod author ships as a disk are read without
// a panic; a header Check accepts names no backing file and no external
// data file, is neither encrypted nor corrupt, and has a size in (0, max];
// one CheckLayout accepts, against the input's length and against a
// length that holds any table, has its tables cluster-aligned, off the
// header, within QEMU's limits and the file, an L1 table that maps the
// virtual size, and refcounts of at most 64 bits. The seeds
// (testdata/fuzz) are headers qemu-img wrote: plain, version 2, with a
// backing file, an external data file, encryption, an overlay of 10 GiB
// and one of 8 TiB, an image with a snapshot. DataFileName walks any
// header's extensions without a panic and returns bytes of the image.
func FuzzReadHeader(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("QFI\xfb"))
	f.Fuzz(func(t *testing.T, b []byte) {
		const max = 4 << 40
		h, err := ReadHeader(bytes.NewReader(b))
		if err != nil {
			return
		}
		if h.Version != 2 && h.Version != 3 {
			t.Fatalf("version %d read without an error", h.Version)
		}
		if name := DataFileName(bytes.NewReader(b), h); len(name) > maxExtName || !bytes.Contains(b, []byte(name)) {
			t.Fatalf("DataFileName = %q: longer than %d bytes or not in the image", name, maxExtName)
		}
		for _, fileSize := range []int64{int64(len(b)), 1 << 62} {
			if h.CheckLayout(fileSize) == nil {
				checkLayoutAccepted(t, h, fileSize)
			}
		}
		if h.Check(max) != nil {
			return
		}
		if h.BackingFileOffset != 0 || h.BackingFileSize != 0 || h.IncompatFeatures&(IncompatDataFile|IncompatCorrupt) != 0 ||
			h.IncompatFeatures&^knownIncompatFeatures != 0 || h.CryptMethod != 0 || h.Size == 0 || h.Size > max {
			t.Fatalf("Check accepted %+v", h)
		}
	})
}

func checkLayoutAccepted(t *testing.T, h Header, fileSize int64) {
	t.Helper()
	cluster := uint64(1) << h.ClusterBits
	end := uint64(fileSize)
	refTable := uint64(h.RefcountTableClusters) * cluster
	l1 := uint64(h.L1Size) * 8
	l2Bits := h.ClusterBits - 3
	if h.IncompatFeatures&IncompatExtendedL2 != 0 {
		l2Bits--
	}
	switch {
	case uint64(h.HeaderLength) > cluster:
		t.Fatalf("CheckLayout(%d) accepted header_length %d in %d-byte clusters", fileSize, h.HeaderLength, cluster)
	case h.RefcountTableOffset == 0 || h.RefcountTableOffset%cluster != 0 || refTable == 0 || refTable > maxRefTableBytes ||
		h.RefcountTableOffset > end || refTable > end-h.RefcountTableOffset:
		t.Fatalf("CheckLayout(%d) accepted a refcount table of %d bytes at %#x", fileSize, refTable, h.RefcountTableOffset)
	case h.L1TableOffset%cluster != 0 || l1 > maxL1Bytes || (l1 > 0 && h.L1TableOffset == 0) || h.L1TableOffset > end || l1 > end-h.L1TableOffset:
		t.Fatalf("CheckLayout(%d) accepted an L1 table of %d bytes at %#x", fileSize, l1, h.L1TableOffset)
	case uint64(h.L1Size)<<(h.ClusterBits+l2Bits) < h.Size: // at most 2^22 << 39: no overflow
		t.Fatalf("CheckLayout(%d) accepted l1_size %d for a virtual size of %d", fileSize, h.L1Size, h.Size)
	case h.SnapshotsOffset%cluster != 0 || h.NbSnapshots > maxSnapshots || (h.NbSnapshots > 0 && h.SnapshotsOffset == 0):
		t.Fatalf("CheckLayout(%d) accepted %d snapshots at %#x", fileSize, h.NbSnapshots, h.SnapshotsOffset)
	case h.RefcountOrder > 6:
		t.Fatalf("CheckLayout(%d) accepted refcount_order %d", fileSize, h.RefcountOrder)
	case h.CompressionType > 1 || (h.CompressionType == 1) != (h.IncompatFeatures&IncompatCompression != 0):
		t.Fatalf("CheckLayout(%d) accepted compression_type %d with incompatible features %#x", fileSize, h.CompressionType, h.IncompatFeatures)
	case h.BackingFileOffset > cluster || (h.BackingFileOffset != 0 &&
		(h.BackingFileSize > maxBackingName || h.BackingFileOffset+uint64(h.BackingFileSize) > min(cluster, end))):
		t.Fatalf("CheckLayout(%d) accepted a backing file name of %d bytes at %d", fileSize, h.BackingFileSize, h.BackingFileOffset)
	}
}

// FuzzOverlay: WriteOverlay either refuses its arguments or writes an
// image that ReadHeader reads back as asked, CheckLayout accepts against
// its length, and whose name is where the header says.
func FuzzOverlay(f *testing.F) {
	f.Add("/var/lib/vmpod/base.raw", "raw", uint64(10<<30))
	f.Add("base.qcow2", "qcow2", uint64(8<<40))
	f.Add("", "qcow2", uint64(512))
	f.Fuzz(func(t *testing.T, backing, format string, size uint64) {
		if size > 64<<40 {
			size %= 64 << 40 // an L1 table of at most 1 MiB: fast
		}
		var m memFile
		if err := WriteOverlay(&m, backing, format, size); err != nil {
			if len(m) != 0 {
				t.Fatalf("WriteOverlay wrote %d bytes and refused: %v", len(m), err)
			}
			return
		}
		h, err := ReadHeader(bytes.NewReader(m))
		if err != nil {
			t.Fatalf("ReadHeader: %v", err)
		}
		if err := h.CheckLayout(int64(len(m))); err != nil {
			t.Fatalf("CheckLayout: %v", err)
		}
		if h.Size != size || h.Version != 3 || h.ClusterBits != 16 || h.RefcountOrder != 4 || h.IncompatFeatures != 0 || h.CompatFeatures != 0 {
			t.Fatalf("%+v: want version 3, size %d, 64 KiB clusters, 16-bit refcounts, no features", h, size)
		}
		if name := string(m[h.BackingFileOffset : h.BackingFileOffset+uint64(h.BackingFileSize)]); name != backing {
			t.Fatalf("backing file name %q, want %q", name, backing)
		}
	})
}
