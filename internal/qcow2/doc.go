// Package qcow2 reads a qcow2 image's header and writes a qcow2 overlay,
// without qemu-img. The format: QEMU's docs/interop/qcow2.txt.
//
// Reading is for a pod author's disk, the part that decides which other
// files QEMU would open for it: ReadHeader reads the fixed header (not
// the extensions nor the tables it points to); CheckLayout refuses what
// QEMU's own open refuses about where the tables lie and how large they
// are, and tables that end past the file; Check refuses what vmpod does
// not run (a backing file, an external data file, encryption, a corrupt
// flag, features it does not know). Each error names the field.
//
// WriteOverlay writes the copy-on-write overlay `qemu-img create -f qcow2
// -u -b BACKING -F FORMAT FILE SIZE` writes, byte for byte with qemu-img
// 7.2 (the tests compare them), in microseconds instead of a process.
//
// pkg/vm's intake (inspectDisk) and overlay (createOverlay) use it: they
// ran qemu-img in QEMU's jail before, two processes and 20-80 ms of each
// VM start. The tests run the real qemu-img and qemu-io.
//
// qcow2 imports the standard library only.
package qcow2
