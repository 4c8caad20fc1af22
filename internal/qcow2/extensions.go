package qcow2

import (
	"encoding/binary"
	"io"
)

// ExtDataFile is the type of the header extension that names a version 3
// image's external data file.
const ExtDataFile = 0x44415441

// maxExtName bounds the name DataFileName returns.
const maxExtName = 1023

// DataFileName is the external data file h's extensions name, read from
// r, the image h was read from; "" when there is none or the extensions
// cannot be walked. It is for a refusal's message: nothing opens the file.
// The walk stays in the first cluster (and before the backing file's
// name), where QEMU looks for extensions, and ends at the end marker.
func DataFileName(r io.ReaderAt, h Header) string {
	if h.Version < 3 || h.ClusterBits < 9 || h.ClusterBits > 21 {
		return ""
	}
	end := uint64(1) << h.ClusterBits
	if h.BackingFileOffset != 0 && h.BackingFileOffset < end {
		end = h.BackingFileOffset
	}
	var ext [8]byte
	for off := uint64(h.HeaderLength); off+8 <= end; {
		if _, err := r.ReadAt(ext[:], int64(off)); err != nil {
			return ""
		}
		typ, n := binary.BigEndian.Uint32(ext[0:]), uint64(binary.BigEndian.Uint32(ext[4:]))
		off += 8
		if typ == 0 || n > end-off {
			return ""
		}
		if typ == ExtDataFile {
			name := make([]byte, min(n, maxExtName))
			if _, err := r.ReadAt(name, int64(off)); err != nil {
				return ""
			}
			return string(name)
		}
		off += (n + 7) &^ 7
	}
	return ""
}
