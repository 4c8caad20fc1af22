package vmspec

import (
	"errors"
	"fmt"
	"path"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// sharesFromVolumeMounts are the shares of the container's volumeMounts
// (sorted), as FromOCI finds them in the mounts containerd's CRI writes
// for the same pod: every volume the kubelet mounts under its pod dir is
// shared, read-only as the kubelet mounts it (kubeletReadOnly); a hostPath
// volume is refused. The cloud-init volume's mount at cloudInitPath is the
// seed, not a share.
func sharesFromVolumeMounts(vols []corev1.Volume, mounts []corev1.VolumeMount, cloudInitPath string) ([]Share, error) {
	var shares []Share
	var errs []error
	for i, m := range mounts {
		field := fmt.Sprintf("spec.containers[0].volumeMounts[%d]", i)
		vi := slices.IndexFunc(vols, func(v corev1.Volume) bool { return v.Name == m.Name })
		switch {
		case vi < 0:
			errs = append(errs, invalid(field+".name", m.Name, "no volume of that name in spec.volumes"))
		case vols[vi].HostPath != nil:
			errs = append(errs, invalid(fmt.Sprintf("spec.volumes[%d].hostPath", vi), vols[vi].HostPath.Path,
				fmt.Sprintf("mounted at %s by %s: a hostPath volume is not shared with a VM's guest, which would get "+
					"a node dir through a file server on the node; use a pod volume instead "+
					"(emptyDir, or a persistentVolumeClaim: a local PV for a dir of the node)", m.MountPath, field)))
		case cloudInitPath != "" && kubeletMountPath(m.MountPath) == cloudInitPath:
			// The seed's source, read by the runtime.
		default:
			shares = append(shares, NewShare(kubeletMountPath(m.MountPath), m.ReadOnly || kubeletReadOnly(&vols[vi].VolumeSource)))
		}
	}
	SortShares(shares)
	return shares, errors.Join(errs...)
}

// kubeletReadOnly reports whether the kubelet mounts a volume of source v
// read-only whatever the volumeMount says: its makeMounts
// (pkg/kubelet/kubelet_pods.go) makes a mount read-only when the
// volumeMount is, or when the volume plugin's Attributes say so, and
// containerd's CRI then writes "ro". The plugins (pkg/volume/*, 1.37):
// configMap, secret, downwardAPI, projected and image always; a claim
// (and a PV behind it, of any plugin) as persistentVolumeClaim.readOnly
// says; csi, nfs, iscsi, fc and flexVolume as their own readOnly says.
// An ephemeral volume's claim is made read-write (its claim source has
// no readOnly), emptyDir and gitRepo are never read-only, and an in-tree
// type CSI migration serves inline (awsElasticBlockStore and its kin) is
// read-only only as the volumeMount says: the migrated spec's readOnly is
// the claim's, and an inline volume has none.
func kubeletReadOnly(v *corev1.VolumeSource) bool {
	switch {
	case v.ConfigMap != nil, v.Secret != nil, v.DownwardAPI != nil, v.Projected != nil, v.Image != nil:
		return true
	case v.PersistentVolumeClaim != nil:
		return v.PersistentVolumeClaim.ReadOnly
	case v.CSI != nil:
		return v.CSI.ReadOnly != nil && *v.CSI.ReadOnly
	case v.NFS != nil:
		return v.NFS.ReadOnly
	case v.ISCSI != nil:
		return v.ISCSI.ReadOnly
	case v.FC != nil:
		return v.FC.ReadOnly
	case v.FlexVolume != nil:
		return v.FlexVolume.ReadOnly
	}
	return false
}

// kubeletMountPath is where the kubelet mounts a volumeMount in the
// container: its mountPath, made absolute when it is not ("data" is
// /data: makeMounts' MakeAbsolutePath), which the apiserver allows.
func kubeletMountPath(mountPath string) string {
	if path.IsAbs(mountPath) {
		return mountPath
	}
	return path.Clean("/" + mountPath)
}
