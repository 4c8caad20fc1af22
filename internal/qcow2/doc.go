// Package qcow2 reads a qcow2 image's header, the part of a pod author's
// disk that decides which other files QEMU would open for it: a backing
// file, an external data file. It reads the fixed header and nothing it
// points to, and refuses what vmpod does not run (a backing file, an
// external data file, encryption, a corrupt flag, features it does not
// know) with an error that names the field.
//
// It is the groundwork for issue 27's intake without qemu-img (pkg/vm's
// inspectDisk runs `qemu-img info` in QEMU's jail, 40 ms of each start);
// nothing calls it yet. The format: QEMU's docs/interop/qcow2.txt.
//
// qcow2 imports the standard library only.
package qcow2
