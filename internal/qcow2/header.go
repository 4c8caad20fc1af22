package qcow2

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Magic starts every qcow2 file: "QFI\xfb".
const Magic = 0x514649fb

// Incompatible feature bits (version 3): an image with a bit set that its
// reader does not know must not be opened.
const (
	IncompatDirty         = 1 << 0
	IncompatCorrupt       = 1 << 1
	IncompatDataFile      = 1 << 2
	IncompatCompression   = 1 << 3
	IncompatExtendedL2    = 1 << 4
	knownIncompatFeatures = IncompatDirty | IncompatCorrupt | IncompatDataFile | IncompatCompression | IncompatExtendedL2
)

// CompatLazyRefcounts, a compatible feature bit (version 3): refcounts
// may lag behind after a crash; QEMU repairs them on open.
const CompatLazyRefcounts = 1 << 0

// Header is the fixed part of a qcow2 header, in the order of the file.
type Header struct {
	Version               uint32
	BackingFileOffset     uint64
	BackingFileSize       uint32
	ClusterBits           uint32
	Size                  uint64 // the virtual disk's size, in bytes
	CryptMethod           uint32
	L1Size                uint32 // entries, 8 bytes each
	L1TableOffset         uint64
	RefcountTableOffset   uint64
	RefcountTableClusters uint32
	NbSnapshots           uint32
	SnapshotsOffset       uint64
	IncompatFeatures      uint64 // version 3; 0 for version 2
	CompatFeatures        uint64 // version 3; 0 for version 2
	AutoclearFeatures     uint64 // version 3; 0 for version 2
	RefcountOrder         uint32 // version 3; 4 (16-bit refcounts) for version 2
	HeaderLength          uint32 // version 3; 72 for version 2
	CompressionType       uint8  // when HeaderLength > 104; else 0 (zlib)
}

// ErrNotQcow2 is returned for data that does not start with Magic.
var ErrNotQcow2 = errors.New("not a qcow2 image (no QFI\\xfb magic)")

// ReadHeader reads the header at the start of r. It checks the fields it
// needs to read the rest (magic, version, cluster size, header length),
// not where the tables lie (CheckLayout) nor what vmpod accepts (Check).
func ReadHeader(r io.ReaderAt) (Header, error) {
	var b [112]byte
	n, err := r.ReadAt(b[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return Header{}, err
	}
	if n < 72 {
		if n >= 4 && binary.BigEndian.Uint32(b[0:]) == Magic {
			return Header{}, fmt.Errorf("qcow2 header: %d bytes, shorter than the 72 of version 2", n)
		}
		return Header{}, ErrNotQcow2
	}
	be := binary.BigEndian
	if be.Uint32(b[0:]) != Magic {
		return Header{}, ErrNotQcow2
	}
	h := Header{
		Version:               be.Uint32(b[4:]),
		BackingFileOffset:     be.Uint64(b[8:]),
		BackingFileSize:       be.Uint32(b[16:]),
		ClusterBits:           be.Uint32(b[20:]),
		Size:                  be.Uint64(b[24:]),
		CryptMethod:           be.Uint32(b[32:]),
		L1Size:                be.Uint32(b[36:]),
		L1TableOffset:         be.Uint64(b[40:]),
		RefcountTableOffset:   be.Uint64(b[48:]),
		RefcountTableClusters: be.Uint32(b[56:]),
		NbSnapshots:           be.Uint32(b[60:]),
		SnapshotsOffset:       be.Uint64(b[64:]),
		RefcountOrder:         4,
		HeaderLength:          72,
	}
	switch h.Version {
	case 2:
	case 3:
		if n < 104 {
			return Header{}, fmt.Errorf("qcow2 header: version 3 in %d bytes, shorter than its 104", n)
		}
		h.IncompatFeatures = be.Uint64(b[72:])
		h.CompatFeatures = be.Uint64(b[80:])
		h.AutoclearFeatures = be.Uint64(b[88:])
		h.RefcountOrder = be.Uint32(b[96:])
		h.HeaderLength = be.Uint32(b[100:])
		if h.HeaderLength < 104 || h.HeaderLength%8 != 0 {
			return Header{}, fmt.Errorf("qcow2 header: header_length %d: want a multiple of 8, at least 104", h.HeaderLength)
		}
		if h.HeaderLength > 104 {
			if n < 105 {
				return Header{}, fmt.Errorf("qcow2 header: header_length %d in %d bytes, without its compression_type", h.HeaderLength, n)
			}
			h.CompressionType = b[104]
		}
	default:
		return Header{}, fmt.Errorf("qcow2 header: version %d: want 2 or 3", h.Version)
	}
	if h.ClusterBits < 9 || h.ClusterBits > 21 {
		return Header{}, fmt.Errorf("qcow2 header: cluster_bits %d: want 9 to 21 (512 B to 2 MiB clusters)", h.ClusterBits)
	}
	return h, nil
}

// Check refuses what vmpod does not run from a pod author's disk: a
// backing file or an external data file (QEMU would open a file the
// author names), encryption, a corrupt flag, incompatible features this
// package does not know, and a virtual size of 0 or above maxSize.
func (h Header) Check(maxSize uint64) error {
	switch {
	case h.BackingFileOffset != 0 || h.BackingFileSize != 0:
		return fmt.Errorf("qcow2 has a backing file (backing_file_offset %d, backing_file_size %d); a disk must stand alone", h.BackingFileOffset, h.BackingFileSize)
	case h.IncompatFeatures&IncompatDataFile != 0:
		return errors.New("qcow2 has an external data file (incompatible feature bit 2); a disk must stand alone")
	case h.IncompatFeatures&IncompatCorrupt != 0:
		return errors.New("qcow2 marked corrupt (incompatible feature bit 1)")
	case h.IncompatFeatures&^knownIncompatFeatures != 0:
		return fmt.Errorf("qcow2 incompatible features %#x: unknown bits %#x", h.IncompatFeatures, h.IncompatFeatures&^knownIncompatFeatures)
	case h.CryptMethod != 0:
		return fmt.Errorf("qcow2 encrypted (crypt_method %d): vmpod runs no encrypted disk", h.CryptMethod)
	case h.Size == 0:
		return errors.New("qcow2 virtual size 0")
	case h.Size > maxSize:
		return fmt.Errorf("qcow2 virtual size %d bytes: above the maximum of %d", h.Size, maxSize)
	}
	return nil
}
