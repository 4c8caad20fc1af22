// Package hostiletar makes the image layers a hostile pod author would
// push to exhaust a node's disk or inodes on unpack, as tar streams
// (uncompressed: a layer of them is gzip'd by whoever pushes it), for
// tests of vmpod's unpack and of containerd's. archive/tar cannot write
// sparse entries, so those are written block by block here.
//
// Imports: the standard library only.
package hostiletar

import (
	"archive/tar"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// Entry is one plain entry of a tar Of makes.
type Entry struct {
	Name string
	Type byte // tar.TypeReg, tar.TypeDir, tar.TypeSymlink
	Body []byte
	Link string
}

// Of is a tar of the entries.
func Of(entries ...Entry) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.Name, Typeflag: e.Type, Linkname: e.Link, Mode: 0o644, Size: int64(len(e.Body))}
		if e.Type == tar.TypeDir {
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			panic(err) // the entries are the test's own
		}
		tw.Write(e.Body)
	}
	tw.Close()
	return b.Bytes()
}

// Zeros is a tar of one regular file of size zero bytes: a few KiB once
// gzip'd (deflate packs a run of zeros about 1000 to 1).
func Zeros(name string, size int64) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: size}); err != nil {
		panic(err)
	}
	zeros := make([]byte, 1<<20)
	for n := size; n > 0; n -= int64(len(zeros)) {
		tw.Write(zeros[:min(n, int64(len(zeros)))])
	}
	tw.Close()
	return b.Bytes()
}

// PAXSparse is a tar of one file in GNU's PAX sparse format 1.0 (what GNU
// tar --sparse --posix writes): the header says the file is realSize
// bytes, its sparse map says all of them are a hole, and the archive
// holds 1.5 KiB whatever realSize is.
func PAXSparse(name string, realSize int64) []byte {
	var b bytes.Buffer
	records := paxRecord("GNU.sparse.major", "1") + paxRecord("GNU.sparse.minor", "0") +
		paxRecord("GNU.sparse.name", name) + paxRecord("GNU.sparse.realsize", strconv.FormatInt(realSize, 10))
	b.Write(header("PaxHeaders/sparse", 'x', int64(len(records)), nil))
	b.Write(padded([]byte(records)))
	mapBlock := padded([]byte("0\n")) // no data fragment: one hole
	b.Write(header("GNUSparseFile.0/sparse", tar.TypeReg, int64(len(mapBlock)), nil))
	b.Write(mapBlock)
	b.Write(make([]byte, 1024)) // end of archive
	return b.Bytes()
}

// GNUSparse is a tar of one file in GNU's old sparse format (type 'S'):
// realSize bytes, no data fragment, 1.5 KiB of archive.
func GNUSparse(name string, realSize int64) []byte {
	var b bytes.Buffer
	b.Write(header(name, tar.TypeGNUSparse, 0, func(h []byte) {
		copy(h[257:265], "ustar  \x00") // GNU magic and version
		numeric(h[483:495], realSize)   // realsize; the sparse array is empty
	}))
	b.Write(make([]byte, 1024))
	return b.Bytes()
}

// ManyFiles is a tar of n empty files in one dir.
func ManyFiles(n int) []byte {
	entries := []Entry{{Name: "many/", Type: tar.TypeDir}}
	for i := range n {
		entries = append(entries, Entry{Name: fmt.Sprintf("many/%d", i), Type: tar.TypeReg})
	}
	return Of(entries...)
}

// Deep is a tar of one empty file depth components deep ("d/d/.../f"),
// with no entry for its parent dirs.
func Deep(depth int) []byte {
	return Of(Entry{Name: strings.Repeat("d/", depth-1) + "f", Type: tar.TypeReg})
}

// header is a 512-byte tar header block (ustar layout) with its checksum,
// after set has filled in what else it needs.
func header(name string, typ byte, size int64, set func([]byte)) []byte {
	h := make([]byte, 512)
	copy(h[0:100], name)
	numeric(h[100:108], 0o644)
	numeric(h[108:116], 0)
	numeric(h[116:124], 0)
	numeric(h[124:136], size)
	numeric(h[136:148], 0)
	h[156] = typ
	copy(h[257:265], "ustar\x0000")
	if set != nil {
		set(h)
	}
	copy(h[148:156], "        ")
	var sum int64
	for _, c := range h {
		sum += int64(c)
	}
	copy(h[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return h
}

// numeric writes n into a tar numeric field: octal, or base-256 when it
// does not fit (GNU's extension, which archive/tar reads).
func numeric(f []byte, n int64) {
	if s := strconv.FormatInt(n, 8); len(s) < len(f) {
		copy(f, fmt.Sprintf("%0*s\x00", len(f)-1, s))
		return
	}
	for i := len(f) - 1; i > 0; i-- {
		f[i] = byte(n)
		n >>= 8
	}
	f[0] = 0x80
}

// paxRecord is one "<len> key=value\n" record, len counting itself.
func paxRecord(k, v string) string {
	body := " " + k + "=" + v + "\n"
	n := len(body) + 1
	for len(strconv.Itoa(n))+len(body) != n {
		n++
	}
	return strconv.Itoa(n) + body
}

// padded is b followed by zeros to a whole number of 512-byte blocks.
func padded(b []byte) []byte {
	return append(b, make([]byte, (512-len(b)%512)%512)...)
}
