package vm

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/vmpod/vmpod/pkg/convert"
	"github.com/vmpod/vmpod/pkg/jail"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// Layout is where one VM's files live in its state dir. Everything the VM
// writes is under Dir, so removing Dir removes the VM's files.
//
// QEMU, jailed (pkg/jail), owns VMDir and sees nothing else of Dir: not
// libvirt's root (its configuration and definitions) nor the jail's spec.
// Root writes into VMDir only while it is fresh (PrepareVMDir), before
// QEMU ran, and reaches sockets there without following links.
type Layout struct{ Dir string }

// podDirIDLen bounds the sandbox id in a pod's dir name: libvirt and QEMU
// put unix sockets several levels below it, and a socket path must stay
// under 108 bytes. 16 hex digits of a random 256-bit id do not collide on a
// node.
const podDirIDLen = 16

// PodLayout is the layout of the pod whose sandbox is sandboxID, under a
// runtime's state root: <stateRoot>/pods/<first 16 of sandboxID>.
func PodLayout(stateRoot, sandboxID string) Layout {
	if len(sandboxID) > podDirIDLen {
		sandboxID = sandboxID[:podDirIDLen]
	}
	return Layout{Dir: filepath.Join(stateRoot, "pods", sandboxID)}
}

// JailerLink is where a runtime with this state root links the jailer
// (jail.LinkEmulator): the domains' emulator.
func JailerLink(stateRoot string) string { return filepath.Join(stateRoot, "bin", jail.EmulatorName) }

// UIDLeases is the dir of QEMU uid leases (jail.Allocate) under a state root.
func UIDLeases(stateRoot string) string { return filepath.Join(stateRoot, "uids") }

// VMDir holds every file QEMU opens for writing. It stays root's: QEMU
// is given the files it writes, not the dir (jail.Spec.Owned).
func (l Layout) VMDir() string { return filepath.Join(l.Dir, "vm") }

// Overlay is the qcow2 overlay whose backing file is the image's disk.
func (l Layout) Overlay() string { return filepath.Join(l.VMDir(), "disk.qcow2") }

// Console is the unix socket QEMU serves the serial console on.
func (l Layout) Console() string { return filepath.Join(l.VMDir(), "console.sock") }

// ConsoleLog records what the guest writes to its serial console, capped
// and rotated into ConsoleLog()+".1". The runtime writes it, outside the
// VM dir: QEMU never sees it.
func (l Layout) ConsoleLog() string { return filepath.Join(l.Dir, "console.log") }

// GuestAgent is the QEMU guest agent channel's socket. It is not in
// VMDir: libvirt (root) connects to it by path, following links, each
// time the guest's agent opens its port, and a QEMU that owned its dir
// could make it a link to any socket on the node. libvirt makes the
// socket and hands QEMU the listening descriptor, so QEMU needs no access
// to the path, and Dir is root's.
func (l Layout) GuestAgent() string { return filepath.Join(l.Dir, "qga.sock") }

// NVRAM is the VM's UEFI variable store.
func (l Layout) NVRAM() string { return filepath.Join(l.VMDir(), "nvram.fd") }

// CloudInitISO is the NoCloud seed image.
func (l Layout) CloudInitISO() string { return filepath.Join(l.VMDir(), "cidata.iso") }

// Devices holds the nodes of the block volumes handed to the VM.
func (l Layout) Devices() string { return filepath.Join(l.VMDir(), "dev") }

// Device is the node of the block volume named name (vmspec.Volume.Name).
func (l Layout) Device(name string) string { return filepath.Join(l.Devices(), name) }

// Libvirt is the embedded libvirt driver's root for this pod.
func (l Layout) Libvirt() string { return filepath.Join(l.Dir, "libvirt") }

// JailRoot is the empty dir QEMU's jail builds its root on.
func (l Layout) JailRoot() string { return filepath.Join(l.Dir, "jail") }

// JailDevices holds the device nodes made for QEMU's uid (jail.Prepare).
func (l Layout) JailDevices() string { return filepath.Join(l.Dir, "jail-dev") }

// JailSpec is the jail's spec file (pkg/jail).
func (l Layout) JailSpec() string { return filepath.Join(l.Dir, "jail.json") }

// FSDir holds the VM's file servers' files (one virtio-fs server per
// share, pkg/vm/shares.go): their jail specs and logs, and the empty dir
// their jails are built on. It is root's and no file server sees it. It
// owns the file servers' uid lease (made with it when the VM's first
// file server starts), and goes with the VM (Undo), the lease given back.
func (l Layout) FSDir() string { return filepath.Join(l.Dir, "fs") }

// ShareSocket is the unix socket the file server of the VM's i-th share
// listens on, and QEMU connects to. It is in VMDir, in QEMU's jail, and
// made QEMU's (startFileServers).
func (l Layout) ShareSocket(i int) string {
	return filepath.Join(l.VMDir(), fmt.Sprintf("fs-%d.sock", i))
}

// ShareJailRoot is the empty dir the file servers' jails are built on.
func (l Layout) ShareJailRoot() string { return filepath.Join(l.FSDir(), "root") }

// ShareJailSpec is the jail spec of the i-th share's file server.
func (l Layout) ShareJailSpec(i int) string {
	return filepath.Join(l.FSDir(), fmt.Sprintf("%d.json", i))
}

// ShareLog is what the i-th share's file server writes on its stderr,
// capped like QEMU's log.
func (l Layout) ShareLog(i int) string { return filepath.Join(l.FSDir(), fmt.Sprintf("%d.log", i)) }

// PrepareVMDir makes VMDir anew and empty, root's until QEMU starts:
// nothing an earlier QEMU of the pod left there (a link to a host file
// above all) is ever written through.
func (l Layout) PrepareVMDir() error {
	if err := os.RemoveAll(l.VMDir()); err != nil {
		return err
	}
	if err := os.MkdirAll(l.Dir, 0o700); err != nil {
		return err
	}
	return os.Mkdir(l.VMDir(), 0o700)
}

// Paths are the convert.Paths of a VM laid out in l, booting img, with
// jailer as its emulator. Volumes and NICs are the runtime's to fill once
// it has made them.
func (l Layout) Paths(s vmspec.Spec, img Image, jailer string) convert.Paths {
	p := convert.Paths{
		Emulator:    jailer,
		EmulatorEnv: []string{jail.EnvSpec + "=" + l.JailSpec()},
		Kernel:      img.Kernel,
		Initrd:      img.Initrd,
		NVRAM:       l.NVRAM(),
		Console:     l.Console(),
		GuestAgent:  l.GuestAgent(),
	}
	if img.Disk != "" {
		p.RootDisk = l.Overlay()
		p.BaseDisk, p.BaseFormat = img.Disk, img.DiskFormat
	}
	if s.Seeded() {
		p.CloudInitISO = l.CloudInitISO()
	}
	if len(s.Shares) > 0 {
		p.Shares = map[string]string{}
		for i, sh := range s.Shares {
			p.Shares[sh.Tag] = l.ShareSocket(i)
		}
	}
	return p
}
