// Package vm is one VM's life on a node: finding what the containerdisk
// ships, laying out the VM's files in its state dir, the qcow2 overlay over
// the image's disk, defining, starting and stopping the domain through
// pkg/virt, and running commands in the guest through its QEMU guest agent.
//
// It may import vmspec, convert, host, virt and the standard library; the
// shim and the CRI server import it, never the other way round.
package vm
