// Command vmpod-qemu is vmpod's jailer: libvirt starts it in place of
// QEMU, as the emulator every vmpod domain names. It reads the VM's jail spec (named by $VMPOD_JAIL),
// enters the container's cgroup, builds QEMU's jail (its own uid, a mount
// namespace with only the VM's files, no capabilities) and execs QEMU.
// Without a spec it only runs QEMU for libvirt's capability probe. See
// pkg/jail.
//
// It is a program of its own, built without cgo, so that it starts in a
// few milliseconds: it runs three times for every VM start. Install it
// next to vm-runtime (/opt/vmpod/bin/vmpod-qemu); vm-runtime links it.
package main

import (
	"os"

	"github.com/vmpod/vmpod/pkg/jail"
)

func main() { os.Exit(jail.Main(os.Args[1:])) }
