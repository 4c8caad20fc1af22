// Package vm is one VM's life on a node: finding what the containerdisk
// ships, laying out the VM's files in its state dir, the qcow2 overlay over
// the image's disk, defining, starting and stopping the domain through
// pkg/virt, and running commands in the guest through its QEMU guest agent.
//
// Held and Undo are what a VM holds on the node and the one path that
// removes it, run by the normal teardown and by the cleanup after a dead
// front door alike.
//
// It may import vmspec, convert, host, virt, jail, podnet, podcgroup,
// containerd's mount package and the standard library; the shim and the
// CRI server import it, never the other way round.
package vm
