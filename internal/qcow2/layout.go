package qcow2

import (
	"errors"
	"fmt"
	"math"
)

// QEMU's limits on a header's tables (block/qcow2.h, QEMU 7.2).
const (
	maxL1Bytes       = 32 << 20 // QCOW_MAX_L1_SIZE
	maxRefTableBytes = 8 << 20  // QCOW_MAX_REFTABLE_SIZE
	maxSnapshots     = 65536    // QCOW_MAX_SNAPSHOTS
	snapshotMinBytes = 40       // sizeof(QCowSnapshotHeader), an entry without its id, name or extra data
	maxBackingName   = 1023
)

// CheckLayout refuses a header that QEMU refuses to open (qcow2_do_open
// in block/qcow2.c, QEMU 7.2) for where its tables lie and how large they
// are, and one whose tables or backing file name end past fileSize, the
// file's length: a truncated or crafted image. It refuses what QEMU
// refuses, and in addition a table at offset 0, over the header, which
// QEMU only finds when it writes. Each error names the header field.
// Check, not CheckLayout, says what vmpod runs.
func (h Header) CheckLayout(fileSize int64) error {
	cluster := uint64(1) << h.ClusterBits
	end := uint64(max(fileSize, 0))
	switch {
	case h.ClusterBits < 9 || h.ClusterBits > 21:
		return fmt.Errorf("qcow2 header: cluster_bits %d: want 9 to 21 (512 B to 2 MiB clusters)", h.ClusterBits)
	case uint64(h.HeaderLength) > cluster:
		return fmt.Errorf("qcow2 header: header_length %d: above the cluster size %d", h.HeaderLength, cluster)
	case h.BackingFileOffset > cluster:
		return fmt.Errorf("qcow2 header: backing_file_offset %d: past the header's cluster (%d bytes)", h.BackingFileOffset, cluster)
	case h.BackingFileOffset != 0 && uint64(h.BackingFileSize) > min(maxBackingName, cluster-h.BackingFileOffset):
		return fmt.Errorf("qcow2 header: backing_file_size %d at backing_file_offset %d: longer than %d bytes or past the header's cluster",
			h.BackingFileSize, h.BackingFileOffset, maxBackingName)
	case h.BackingFileOffset != 0 && h.BackingFileOffset+uint64(h.BackingFileSize) > end:
		return fmt.Errorf("qcow2 header: backing_file_offset %d, backing_file_size %d: the name ends past the file's end at %d",
			h.BackingFileOffset, h.BackingFileSize, end)
	case h.CompressionType > 1:
		return fmt.Errorf("qcow2 header: compression_type %d: want 0 (zlib) or 1 (zstd)", h.CompressionType)
	case h.CompressionType == 0 && h.IncompatFeatures&IncompatCompression != 0:
		return errors.New("qcow2 header: compression_type 0 (zlib) with incompatible feature bit 3 (compression type) set")
	case h.CompressionType != 0 && h.IncompatFeatures&IncompatCompression == 0:
		return fmt.Errorf("qcow2 header: compression_type %d without incompatible feature bit 3 (compression type)", h.CompressionType)
	case h.IncompatFeatures&IncompatExtendedL2 != 0 && h.ClusterBits < 14:
		return fmt.Errorf("qcow2 header: cluster_bits %d with extended L2 entries (incompatible feature bit 4): subclusters under 512 bytes", h.ClusterBits)
	case h.RefcountOrder > 6:
		return fmt.Errorf("qcow2 header: refcount_order %d: want at most 6 (64-bit refcounts)", h.RefcountOrder)
	case h.RefcountTableClusters == 0:
		return errors.New("qcow2 header: refcount_table_clusters 0: the image has no refcount table")
	}
	if err := checkTable("refcount_table_offset", h.RefcountTableOffset, "refcount_table_clusters", uint64(h.RefcountTableClusters), cluster, maxRefTableBytes, cluster, end); err != nil {
		return err
	}
	if err := checkTable("snapshots_offset", h.SnapshotsOffset, "nb_snapshots", uint64(h.NbSnapshots), snapshotMinBytes, maxSnapshots*snapshotMinBytes, cluster, end); err != nil {
		return err
	}
	if err := checkTable("l1_table_offset", h.L1TableOffset, "l1_size", uint64(h.L1Size), 8, maxL1Bytes, cluster, end); err != nil {
		return err
	}
	// Each L1 entry maps one L2 table, a cluster of 8-byte entries (16
	// bytes with extended L2 entries), each mapping a cluster.
	l2Bits := h.ClusterBits - 3
	if h.IncompatFeatures&IncompatExtendedL2 != 0 {
		l2Bits--
	}
	shift := h.ClusterBits + l2Bits
	need := h.Size >> shift
	if h.Size&(1<<shift-1) != 0 {
		need++
	}
	switch {
	case need > math.MaxInt32:
		return fmt.Errorf("qcow2 header: size %d: needs %d L1 entries, above QEMU's %d", h.Size, need, math.MaxInt32)
	case uint64(h.L1Size) < need:
		return fmt.Errorf("qcow2 header: l1_size %d: maps %d bytes, less than the virtual size %d (%d entries)",
			h.L1Size, uint64(h.L1Size)<<shift, h.Size, need)
	}
	return nil
}

// checkTable checks a table of entries of entryLen bytes at offset as
// QEMU's qcow2_validate_table does (at most maxBytes, cluster-aligned,
// ending below 2^63), and that it lies between the header and fileEnd.
func checkTable(offsetField string, offset uint64, countField string, entries, entryLen, maxBytes, cluster, fileEnd uint64) error {
	if entries > maxBytes/entryLen {
		return fmt.Errorf("qcow2 header: %s %d: above QEMU's limit of %d", countField, entries, maxBytes/entryLen)
	}
	n := entries * entryLen
	switch {
	case offset%cluster != 0:
		return fmt.Errorf("qcow2 header: %s %#x: not a multiple of the cluster size %d", offsetField, offset, cluster)
	case offset > math.MaxInt64-n:
		return fmt.Errorf("qcow2 header: %s %#x with %s %d: the table ends past 2^63", offsetField, offset, countField, entries)
	case entries > 0 && offset == 0:
		return fmt.Errorf("qcow2 header: %s 0 with %s %d: the table would lie over the header", offsetField, countField, entries)
	case offset+n > fileEnd:
		return fmt.Errorf("qcow2 header: %s %#x with %s %d: the table (%d bytes) ends past the file's end at %d",
			offsetField, offset, countField, entries, n, fileEnd)
	}
	return nil
}
