package vm

import specs "github.com/opencontainers/runtime-spec/specs-go"

// MountSource is the host path mounted at dest in the container whose
// OCI spec is oci, "" if none (the last mount of dest wins, as in the
// container): the pod's resolv.conf, a cloud-init volume.
func MountSource(oci *specs.Spec, dest string) string {
	src := ""
	for _, m := range oci.Mounts {
		if m.Destination == dest {
			src = m.Source
		}
	}
	return src
}

// BlockDevicesOf are the block devices the kubelet handed the container
// (its volumeDevices), as its OCI spec names them.
func BlockDevicesOf(oci *specs.Spec) []BlockDevice {
	if oci.Linux == nil {
		return nil
	}
	var devs []BlockDevice
	for _, d := range oci.Linux.Devices {
		if d.Type == "b" {
			devs = append(devs, BlockDevice{Path: d.Path, Major: d.Major, Minor: d.Minor})
		}
	}
	return devs
}
