// Package vmspectest builds VM pods for tests: MakePod("web").VCPUs(2).Obj().
// It may import vmspec and the Kubernetes API types only.
package vmspectest

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
)

// Image is the test guest's containerdisk (hack/guest/build.sh).
const Image = "localhost/vmpod/test-guest:v1"

// PodWrapper builds a VM pod. The zero pod it starts from is valid: one
// container, 1 vCPU, 256Mi, runtimeClassName vmpod.
type PodWrapper struct{ corev1.Pod }

// MakePod starts a VM pod named name in namespace "default".
func MakePod(name string) *PodWrapper {
	rc := "vmpod"
	p := &PodWrapper{corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			RuntimeClassName: &rc,
			Containers: []corev1.Container{{
				Name:  "vm",
				Image: Image,
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
					corev1.ResourceMemory: resource.MustParse("256Mi"),
				}},
			}},
		},
	}}
	return p
}

// Obj returns the pod.
func (p *PodWrapper) Obj() *corev1.Pod { return &p.Pod }

// Namespace sets the namespace.
func (p *PodWrapper) Namespace(ns string) *PodWrapper { p.Pod.Namespace = ns; return p }

// UID sets the pod UID.
func (p *PodWrapper) UID(uid string) *PodWrapper { p.Pod.UID = types(uid); return p }

// Image sets the VM container's image.
func (p *PodWrapper) Image(ref string) *PodWrapper { p.Spec.Containers[0].Image = ref; return p }

// CPU sets limits.cpu (e.g. "1500m"); "" removes it.
func (p *PodWrapper) CPU(q string) *PodWrapper { return p.limit(corev1.ResourceCPU, q) }

// Memory sets limits.memory (e.g. "1Gi"); "" removes it.
func (p *PodWrapper) Memory(q string) *PodWrapper { return p.limit(corev1.ResourceMemory, q) }

func (p *PodWrapper) limit(r corev1.ResourceName, q string) *PodWrapper {
	l := p.Spec.Containers[0].Resources.Limits
	if q == "" {
		delete(l, r)
		return p
	}
	l[r] = resource.MustParse(q)
	return p
}

// Annotation sets one annotation.
func (p *PodWrapper) Annotation(k, v string) *PodWrapper {
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[k] = v
	return p
}

// RuntimeClass sets runtimeClassName; "" clears it.
func (p *PodWrapper) RuntimeClass(name string) *PodWrapper {
	if name == "" {
		p.Spec.RuntimeClassName = nil
		return p
	}
	p.Spec.RuntimeClassName = &name
	return p
}

// BlockVolume adds a PVC volume and a volumeDevice for it.
func (p *PodWrapper) BlockVolume(name, claim, devicePath string) *PodWrapper {
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
	}})
	c := &p.Spec.Containers[0]
	c.VolumeDevices = append(c.VolumeDevices, corev1.VolumeDevice{Name: name, DevicePath: devicePath})
	return p
}

// HostPathBlockVolume adds a hostPath volume named in volumeDevices, which
// no valid pod has.
func (p *PodWrapper) HostPathBlockVolume(name, path, devicePath string) *PodWrapper {
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: path},
	}})
	c := &p.Spec.Containers[0]
	c.VolumeDevices = append(c.VolumeDevices, corev1.VolumeDevice{Name: name, DevicePath: devicePath})
	return p
}

// Volume adds a volume of source src, mounted at mountPath unless it is
// "" (volumeMounts[].readOnly unset, as most pods leave it).
func (p *PodWrapper) Volume(name string, src corev1.VolumeSource, mountPath string) *PodWrapper {
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: src})
	if mountPath != "" {
		p.VolumeMount(name, mountPath, "")
	}
	return p
}

// ConfigMapVolume adds a configMap volume, mounted at mountPath unless it is "".
func (p *PodWrapper) ConfigMapVolume(name, configMap, mountPath string) *PodWrapper {
	return p.Volume(name, corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: configMap}},
	}, mountPath)
}

// SecretVolume adds a secret volume, mounted at mountPath unless it is "".
func (p *PodWrapper) SecretVolume(name, secret, mountPath string) *PodWrapper {
	return p.Volume(name, corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}, mountPath)
}

// ProjectedVolume adds a projected volume of a service account token, as
// the apiserver adds kube-api-access-*, mounted at mountPath unless it is "".
func (p *PodWrapper) ProjectedVolume(name, mountPath string) *PodWrapper {
	return p.Volume(name, corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
		ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"},
	}}}}, mountPath)
}

// DownwardAPIVolume adds a downwardAPI volume of the pod's labels, mounted
// at mountPath unless it is "".
func (p *PodWrapper) DownwardAPIVolume(name, mountPath string) *PodWrapper {
	return p.Volume(name, corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{{
		Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"},
	}}}}, mountPath)
}

// EmptyDirVolume adds an emptyDir volume, mounted at mountPath unless it is "".
func (p *PodWrapper) EmptyDirVolume(name, mountPath string) *PodWrapper {
	return p.Volume(name, corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}, mountPath)
}

// ClaimVolume adds a persistentVolumeClaim volume, mounted (a filesystem
// claim) at mountPath unless it is "".
func (p *PodWrapper) ClaimVolume(name, claim, mountPath string) *PodWrapper {
	return p.Volume(name, corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
	}, mountPath)
}

// ReadOnlyClaimVolume is ClaimVolume with persistentVolumeClaim.readOnly.
func (p *PodWrapper) ReadOnlyClaimVolume(name, claim, mountPath string) *PodWrapper {
	return p.Volume(name, corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: true},
	}, mountPath)
}

// ImageVolume adds an image volume of the image reference, mounted at
// mountPath unless it is "".
func (p *PodWrapper) ImageVolume(name, reference, mountPath string) *PodWrapper {
	return p.Volume(name, corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: reference}}, mountPath)
}

// HostPathVolume adds a hostPath volume of the node's dir hostPath,
// mounted at mountPath unless it is "" (which no VM pod may mount).
func (p *PodWrapper) HostPathVolume(name, hostPath, mountPath string) *PodWrapper {
	return p.Volume(name, corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hostPath}}, mountPath)
}

// VolumeMount mounts an existing volume once more, at mountPath, with
// subPath unless it is "".
func (p *PodWrapper) VolumeMount(name, mountPath, subPath string) *PodWrapper {
	c := &p.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: mountPath, SubPath: subPath})
	return p
}

// ReadOnlyVolumeMount is VolumeMount with readOnly: true.
func (p *PodWrapper) ReadOnlyVolumeMount(name, mountPath, subPath string) *PodWrapper {
	c := &p.Spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: mountPath, SubPath: subPath, ReadOnly: true})
	return p
}

// Container adds another container (which makes the pod invalid as a VM pod).
func (p *PodWrapper) Container(name, image string) *PodWrapper {
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: name, Image: image})
	return p
}

// InitContainer adds an init container (which makes the pod invalid as a VM pod).
func (p *PodWrapper) InitContainer(name, image string) *PodWrapper {
	p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: name, Image: image})
	return p
}

// NodeName binds the pod to a node.
func (p *PodWrapper) NodeName(n string) *PodWrapper { p.Spec.NodeName = n; return p }

// Privileged makes the container privileged.
func (p *PodWrapper) Privileged() *PodWrapper {
	on := true
	p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &on}
	return p
}

func types(uid string) k8stypes.UID { return k8stypes.UID(uid) }
