package qcow2

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

// The overlay's geometry: qemu-img create's defaults for compat 1.1.
const (
	overlayClusterBits  = 16
	overlayCluster      = 1 << overlayClusterBits
	overlayHeaderLength = 112 // QEMU's QCowHeader: 104 bytes, compression_type, 7 of padding
	overlayL2Bits       = overlayClusterBits - 3

	// MaxOverlaySize is the largest virtual size QEMU gives an image of
	// 64 KiB clusters, 2 PiB: a 32 MiB L1 table of entries that each map
	// an L2 table's 512 MiB.
	MaxOverlaySize = maxL1Bytes / 8 << (overlayClusterBits + overlayL2Bits)
)

// Header extension types (docs/interop/qcow2.txt).
const (
	extBackingFormat = 0xe2792aca
	extFeatureNames  = 0x6803f857
)

// featureNames is QEMU 7.2's feature name table, in its order: qemu-img
// info and QEMU name an unknown bit from it.
var featureNames = []struct {
	kind, bit uint8 // kind: 0 incompatible, 1 compatible, 2 autoclear
	name      string
}{
	{0, 0, "dirty bit"},
	{0, 1, "corrupt bit"},
	{0, 2, "external data file"},
	{0, 3, "compression type"},
	{0, 4, "extended L2 entries"},
	{1, 0, "lazy refcounts"},
	{2, 0, "bitmaps"},
	{2, 1, "raw external data"},
}

// A backing file name of maxBackingName bytes after the header and its
// extensions always fits in cluster 0, so WriteOverlay has no error for a
// name that would not: this constant does not compile otherwise.
const _ uint = overlayCluster - (overlayHeaderLength + 8 + 8 + 8 + 8*48 + 8 + maxBackingName)

// Nor do the metadata clusters ever need a second refcount block (one
// holds 32768 16-bit refcounts): header, refcount table and block, L1.
const _ uint = overlayCluster/2 - (3 + maxL1Bytes/overlayCluster)

// WriteOverlay writes to w, from offset 0, a qcow2 image of virtual size
// size whose every cluster reads from backingFile, an image of
// backingFormat ("raw" or "qcow2"): a copy-on-write overlay with no data
// cluster allocated. It is the image `qemu-img create -f qcow2 -u -b
// backingFile -F backingFormat FILE size` writes, byte for byte with
// qemu-img 7.2: version 3 (compat 1.1), 64 KiB clusters, 16-bit
// refcounts, no lazy refcounts, zlib; the header cluster (the header, the
// backing format and QEMU 7.2's feature name table as extensions, the
// backing file name), the refcount table, one refcount block, then the
// L1 table, which ends the file.
// WriteOverlay writes every byte of it, so w needs no zeroes of its own,
// but a longer file keeps its tail: give it a new or empty one. It does
// not sync.
//
// backingFile is stored as given: QEMU resolves a relative name against
// the overlay's directory, and opens it without WriteOverlay checking it
// exists. WriteOverlay refuses a size of 0, one that is not a multiple of
// 512 (qemu-img rounds it up; here the caller rounds, so no size changes
// unseen) or above MaxOverlaySize, and a backingFile that is empty,
// longer than the 1023 bytes QEMU reads or holds a NUL.
func WriteOverlay(w io.WriterAt, backingFile, backingFormat string, size uint64) error {
	switch {
	case size == 0:
		return errors.New("qcow2 overlay: size 0")
	case size%512 != 0:
		return fmt.Errorf("qcow2 overlay: size %d: not a multiple of 512 (qemu-img would round it up to %d)", size, (size+511)&^511)
	case size > MaxOverlaySize:
		return fmt.Errorf("qcow2 overlay: size %d: above %d, the most 64 KiB clusters address", size, uint64(MaxOverlaySize))
	case backingFile == "":
		return errors.New("qcow2 overlay: backingFile empty")
	case len(backingFile) > maxBackingName:
		return fmt.Errorf("qcow2 overlay: backingFile %d bytes long: QEMU reads at most %d", len(backingFile), maxBackingName)
	case strings.IndexByte(backingFile, 0) >= 0:
		return fmt.Errorf("qcow2 overlay: backingFile %q holds a NUL, where QEMU would cut it", backingFile)
	case backingFormat != "raw" && backingFormat != "qcow2":
		return fmt.Errorf("qcow2 overlay: backingFormat %q: want \"raw\" or \"qcow2\"", backingFormat)
	}
	const (
		refTable = 1 * overlayCluster
		refBlock = 2 * overlayCluster
		l1Table  = 3 * overlayCluster
	)
	l1Size := (size + 1<<(overlayClusterBits+overlayL2Bits) - 1) >> (overlayClusterBits + overlayL2Bits)
	l1Bytes := l1Size * 8
	fileEnd := l1Table + l1Bytes

	// The three metadata clusters and the L1 table's first cluster, or all
	// of it when it is smaller, in one write; the rest of L1 from its zeroes.
	buf := make([]byte, l1Table+min(l1Bytes, overlayCluster))
	be := binary.BigEndian
	h := buf[:overlayCluster]
	be.PutUint32(h[0:], Magic)
	be.PutUint32(h[4:], 3)
	be.PutUint32(h[20:], overlayClusterBits)
	be.PutUint64(h[24:], size)
	be.PutUint32(h[36:], uint32(l1Size))
	be.PutUint64(h[40:], l1Table)
	be.PutUint64(h[48:], refTable)
	be.PutUint32(h[56:], 1) // refcount_table_clusters
	be.PutUint32(h[96:], 4) // refcount_order: 16-bit refcounts
	be.PutUint32(h[100:], overlayHeaderLength)
	// compression_type at 104: 0, zlib.

	off := overlayHeaderLength
	ext := func(typ uint32, data []byte) {
		be.PutUint32(h[off:], typ)
		be.PutUint32(h[off+4:], uint32(len(data)))
		copy(h[off+8:], data)
		off += 8 + (len(data)+7)&^7
	}
	ext(extBackingFormat, []byte(backingFormat))
	table := make([]byte, 48*len(featureNames))
	for i, f := range featureNames {
		e := table[48*i:]
		e[0], e[1] = f.kind, f.bit
		copy(e[2:48], f.name)
	}
	ext(extFeatureNames, table)
	ext(0, nil) // the end of the extensions
	be.PutUint64(h[8:], uint64(off))
	be.PutUint32(h[16:], uint32(len(backingFile)))
	copy(h[off:], backingFile)

	be.PutUint64(buf[refTable:], refBlock)
	metadata := 3 + (l1Bytes+overlayCluster-1)/overlayCluster
	for i := range metadata {
		be.PutUint16(buf[refBlock+2*i:], 1)
	}

	if _, err := w.WriteAt(buf, 0); err != nil {
		return fmt.Errorf("qcow2 overlay: %w", err)
	}
	zeroes := buf[l1Table:]
	for at := uint64(len(buf)); at < fileEnd; at += uint64(len(zeroes)) {
		if _, err := w.WriteAt(zeroes[:min(uint64(len(zeroes)), fileEnd-at)], int64(at)); err != nil {
			return fmt.Errorf("qcow2 overlay: %w", err)
		}
	}
	return nil
}
