package vmspec

import (
	"crypto/sha256"
	"encoding/hex"
	"path"
	"regexp"
	"strings"
)

// plainDeviceName is a device name the guest can see verbatim as a disk
// serial: at most MaxSerialLen characters that QEMU and libvirt accept in a
// serial and udev keeps as they are in /dev/disk/by-id. It has no '_', so no
// plain name is ever spelled like a hashed one (volumeID).
var plainDeviceName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.-]{0,19}$`)

// volumeID names a block volume inside the VM: it is the Volume's Name (the
// key of convert.Paths.Volumes and the device node's file name in the VM's
// state dir) and its disk serial.
//
// It is made from the device path alone, because that is all both front
// doors see: a Pod names the volume and its devicePath, but the OCI spec
// containerd writes for the shim carries only the device's container path.
// A name taken from the volume (FromPod) or from the path's base name
// (FromOCI, as before) gave the same disk two serials, and two devices
// /dev/a/data and /dev/b/data one.
//
// "/dev/<name>" with a short plain name gives "<name>" (devicePath
// /dev/data: serial data, /dev/disk/by-id/virtio-data in the guest).
// Any other path gives up to 11 characters of its base name, "_" and 8 hex
// digits of the path's SHA-256: stable, at most 20 characters (what
// virtio-blk passes to the guest) and, but for a hash collision, unique.
func volumeID(devicePath string) string {
	if name, ok := strings.CutPrefix(devicePath, "/dev/"); ok && plainDeviceName.MatchString(name) {
		return name
	}
	sum := sha256.Sum256([]byte(devicePath))
	base := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.':
			return r
		}
		return -1
	}, path.Base(devicePath))
	base = strings.TrimLeft(base, ".-")
	if len(base) > 11 {
		base = base[:11]
	}
	if base == "" {
		base = "disk"
	}
	return base + "_" + hex.EncodeToString(sum[:4])
}

// volumeIDPattern is what volumeID makes, and so what Validate accepts as a
// Volume's Name: a file name of its own, never a path.
var volumeIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,19}$`)
