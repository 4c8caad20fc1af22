package vmspec_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"

	"github.com/vmpod/vmpod/pkg/vmspec"
	. "github.com/vmpod/vmpod/pkg/vmspec/vmspectest"
)

// podDir is the kubelet's dir of the pod of UID podUID.
const podDir = vmspec.DefaultKubeletRoot + "/pods/" + podUID

// TestSharesBothDoors: the shares a pod's volumeMounts become, the same
// from the pod (FromPod: the scheduler, render) and from the OCI spec
// containerd's CRI writes for it (FromOCI: the node); and the pods both
// refuse, each door naming what it sees.
func TestSharesBothDoors(t *testing.T) {
	ro := func(p string) vmspec.Share { return vmspec.NewShare(p, true) }
	rw := func(p string) vmspec.Share { return vmspec.NewShare(p, false) }
	most, many, mostAndImage := MakePod("web"), MakePod("web"), MakePod("web")
	var mostShares []vmspec.Share
	for i := range vmspec.MaxShares + 1 {
		name, path := fmt.Sprintf("v%d", i), fmt.Sprintf("/v/%d", i)
		many.EmptyDirVolume(name, path)
		if i < vmspec.MaxShares {
			most.EmptyDirVolume(name, path)
			mostAndImage.EmptyDirVolume(name, path)
			mostShares = append(mostShares, rw(path))
		}
	}
	vmspec.SortShares(mostShares)
	tests := []struct {
		name string
		pod  *PodWrapper
		want []vmspec.Share
		// wantPod and wantOCI are in the doors' errors; nil: accepted.
		wantPod, wantOCI []string
	}{
		{name: "no volumes: no shares (the kubelet's and containerd's own files are none)", pod: MakePod("web")},
		{name: "configMap: read-only though the mount is not", pod: MakePod("web").ConfigMapVolume("conf", "web-conf", "/etc/conf"),
			want: []vmspec.Share{ro("/etc/conf")}},
		{name: "secret: read-only", pod: MakePod("web").SecretVolume("creds", "web-creds", "/etc/creds"),
			want: []vmspec.Share{ro("/etc/creds")}},
		{name: "projected service account token and downwardAPI: read-only",
			pod:  MakePod("web").ProjectedVolume("kube-api-access-x1", "/var/run/secrets/kubernetes.io/serviceaccount").DownwardAPIVolume("info", "/etc/podinfo"),
			want: []vmspec.Share{ro("/etc/podinfo"), ro("/var/run/secrets/kubernetes.io/serviceaccount")}},
		{name: "emptyDir: read-write", pod: MakePod("web").EmptyDirVolume("scratch", "/scratch"),
			want: []vmspec.Share{rw("/scratch")}},
		{name: "emptyDir mounted readOnly: read-only", pod: MakePod("web").EmptyDirVolume("scratch", "").ReadOnlyVolumeMount("scratch", "/scratch", ""),
			want: []vmspec.Share{ro("/scratch")}},
		{name: "claim: read-write; readOnly claim: read-only",
			pod:  MakePod("web").ClaimVolume("data", "web-data", "/data").ReadOnlyClaimVolume("ref", "reference", "/ref"),
			want: []vmspec.Share{rw("/data"), ro("/ref")}},
		{name: "a subPath of a claim, below its whole mount",
			pod:  MakePod("web").ClaimVolume("data", "web-data", "/data").VolumeMount("data", "/data/logs", "logs"),
			want: []vmspec.Share{rw("/data"), rw("/data/logs")}},
		{name: "a relative mountPath is the kubelet's /<mountPath>", pod: MakePod("web").EmptyDirVolume("scratch", "scratch"),
			want: []vmspec.Share{rw("/scratch")}},
		{name: "cloud-init volume: the seed, not a share",
			pod: MakePod("web").ConfigMapVolume("seed", "web-seed", "/cloud-init").
				Annotation(vmspec.AnnotationCloudInitVolume, "seed").EmptyDirVolume("scratch", "/scratch"),
			want: []vmspec.Share{rw("/scratch")}},
		{name: "a pod volume at /etc/hosts is shared, in place of the kubelet's hosts file",
			pod:  MakePod("web").ConfigMapVolume("hosts", "web-hosts", "").VolumeMount("hosts", "/etc/hosts", "hosts"),
			want: []vmspec.Share{ro("/etc/hosts")}},
		{name: "the most shares", pod: most, want: mostShares},
		{name: "an image volume: read-only", pod: MakePod("web").ImageVolume("tools", "registry.example/tools:v1", "/opt/tools"),
			want: []vmspec.Share{ro("/opt/tools")}},
		{name: "an image volume's sub path, mounted readOnly or not: read-only",
			pod: MakePod("web").ImageVolume("tools", "registry.example/tools:v1", "/opt/tools").
				VolumeMount("tools", "/opt/bin", "usr/bin").ReadOnlyVolumeMount("tools", "/etc/tools", "etc/"),
			want: []vmspec.Share{ro("/etc/tools"), ro("/opt/bin"), ro("/opt/tools")}},
		{name: "image volumes count as shares", pod: MakePod("web").
			ImageVolume("a", "registry.example/a:v1", "/a").ImageVolume("b", "registry.example/b:v1", "/b").EmptyDirVolume("scratch", "/scratch"),
			want: []vmspec.Share{ro("/a"), ro("/b"), rw("/scratch")}},
		{name: "hostPath refused on both", pod: MakePod("web").EmptyDirVolume("scratch", "/scratch").HostPathVolume("host", "/srv/data", "/data"),
			wantPod: []string{`spec.volumes[1].hostPath: "/srv/data": mounted at /data by spec.containers[0].volumeMounts[1]: a hostPath volume is not shared with a VM's guest`},
			wantOCI: []string{`mounts["/data"]: source "/srv/data" is not a volume of this pod, so it is not shared with the guest: ` +
				`a VM's guest gets the pod's own volumes (configMap, secret, downwardAPI, projected, emptyDir, persistentVolumeClaim, ephemeral, csi, image), ` +
				`never a hostPath volume or another pod's; a node admin may allow host dirs with vm-runtime's --volume-host-paths`}},
		{name: "16 volumes and an image volume refused", pod: mostAndImage.ImageVolume("img", "registry.example/img:v1", "/img"),
			wantPod: []string{`spec.containers[0].volumeMounts: "17 volumes": a VM pod shares at most 16 filesystem volumes`},
			wantOCI: []string{`spec.containers[0].volumeMounts: "17 volumes": a VM pod shares at most 16 filesystem volumes`}},
		{name: "17 volumes refused naming volumeMounts", pod: many,
			wantPod: []string{`spec.containers[0].volumeMounts: "17 volumes": a VM pod shares at most 16 filesystem volumes`},
			wantOCI: []string{`spec.containers[0].volumeMounts: "17 volumes": a VM pod shares at most 16 filesystem volumes`}},
		{name: "an emptyDir at /dev/shm: under the guest kernel's /dev", pod: MakePod("web").EmptyDirVolume("shm", "/dev/shm"),
			wantPod: []string{`volumeMounts[0].mountPath: "/dev/shm": under the guest kernel's own /proc, /sys, /dev`},
			wantOCI: []string{`volumeMounts[0].mountPath: "/dev/shm": under the guest kernel's own /proc, /sys, /dev`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := tt.pod.UID(podUID).Obj()
			fromPod, errPod := vmspec.FromPod(pod)
			fromOCI, errOCI := vmspec.FromOCI(criSpec(pod), vmspec.MountRules{})
			checkErr(t, "FromPod", errPod, tt.wantPod)
			checkErr(t, "FromOCI", errOCI, tt.wantOCI)
			if errPod != nil || errOCI != nil {
				return
			}
			if diff := cmp.Diff(tt.want, fromPod.Shares); diff != "" {
				t.Errorf("FromPod shares (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, fromOCI.Shares); diff != "" {
				t.Errorf("FromOCI shares (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFromPodSharesErrors: what only the pod shows.
func TestFromPodSharesErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		pod  *PodWrapper
		want []string
	}{
		{"a volumeMount naming no volume", MakePod("web").EmptyDirVolume("scratch", "/scratch").VolumeMount("gone", "/gone", ""),
			[]string{`spec.containers[0].volumeMounts[1].name: "gone": no volume of that name in spec.volumes`}},
		{"a hostPath at the cloud-init volume's path (the kubelet mounts \"ci\" at /ci): refused",
			MakePod("web").ConfigMapVolume("seed", "s", "/ci").Annotation(vmspec.AnnotationCloudInitVolume, "seed").HostPathVolume("host", "/srv", "ci"),
			[]string{`spec.volumes[1].hostPath: "/srv": mounted at ci by spec.containers[0].volumeMounts[1]`}},
		{"a hostPath mounted twice: refused per mount", MakePod("web").HostPathVolume("host", "/srv", "/a").VolumeMount("host", "/b", "x"),
			[]string{`spec.volumes[0].hostPath: "/srv": mounted at /a by spec.containers[0].volumeMounts[0]`,
				`spec.volumes[0].hostPath: "/srv": mounted at /b by spec.containers[0].volumeMounts[1]`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := vmspec.FromPod(tt.pod.Obj())
			checkErr(t, "FromPod", err, tt.want)
		})
	}
}

// TestFromPodSharesReadOnly: each volume type is read-only in the guest
// exactly when the kubelet mounts it read-only (its plugin's attributes),
// which is when containerd's spec says "ro".
func TestFromPodSharesReadOnly(t *testing.T) {
	yes := true
	for _, tt := range []struct {
		name string
		src  corev1.VolumeSource
		want bool
	}{
		{"configMap", corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}, true},
		{"secret", corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{}}, true},
		{"downwardAPI", corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{}}, true},
		{"projected", corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}, true},
		{"image", corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "registry.example/data:v1"}}, true},
		{"emptyDir", corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}, false},
		{"persistentVolumeClaim", corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}, false},
		{"persistentVolumeClaim readOnly", corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c", ReadOnly: true}}, true},
		{"ephemeral (its claim is read-write)", corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}, false},
		{"csi", corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "d"}}, false},
		{"csi readOnly", corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "d", ReadOnly: &yes}}, true},
		{"nfs readOnly", corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "s", Path: "/", ReadOnly: true}}, true},
		{"gitRepo", corev1.VolumeSource{GitRepo: &corev1.GitRepoVolumeSource{Repository: "r"}}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := vmspec.FromPod(MakePod("web").Volume("v", tt.src, "/v").Obj())
			if err != nil {
				t.Fatal(err)
			}
			if want := []vmspec.Share{vmspec.NewShare("/v", tt.want)}; !cmp.Equal(want, s.Shares) {
				t.Errorf("shares %+v, want %+v", s.Shares, want)
			}
		})
	}
}

// bind is a bind mount as containerd's CRI writes one: type bind,
// options rbind, rprivate and mode ("ro", "rro" or "rw").
func bind(dst, src, mode string) specs.Mount {
	return specs.Mount{Destination: dst, Source: src, Type: "bind", Options: []string{"rbind", "rprivate", mode}}
}

// TestFromOCIShares: the node's rule, mount by mount (MountRules).
func TestFromOCIShares(t *testing.T) {
	vol := func(name string) string { return podDir + "/volumes/kubernetes.io~empty-dir/" + name }
	const refused = "is not a volume of this pod, so it is not shared with the guest"
	// containerd's image volumes of this sandbox (ociSpec's 0123abcd).
	imageVols := vmspec.ContainerdImageVolumes(vmspec.DefaultContainerdStateDir)
	img := imageVols + "/0123abcd/" + strings.Repeat("ab", 32)
	tests := []struct {
		name   string
		rules  vmspec.MountRules
		uid    string // the sandbox UID annotation; "" none
		sbx    string // the sandbox ID annotation; "" ociSpec's, "-" none
		mounts []specs.Mount
		want   []vmspec.Share
		errs   []string // in the error; nil: accepted
	}{
		{name: "a pod volume, read-write", mounts: []specs.Mount{bind("/scratch", vol("scratch"), "rw")},
			want: []vmspec.Share{vmspec.NewShare("/scratch", false)}},
		{name: "ro and rro are read-only", mounts: []specs.Mount{bind("/a", vol("a"), "ro"), bind("/b", vol("b"), "rro")},
			want: []vmspec.Share{vmspec.NewShare("/a", true), vmspec.NewShare("/b", true)}},
		{name: "a subPath the kubelet bind-mounted", mounts: []specs.Mount{bind("/logs", podDir+"/volume-subpaths/data/vm/0", "rw")},
			want: []vmspec.Share{vmspec.NewShare("/logs", false)}},
		{name: "not bind mounts: skipped", mounts: containerdDefaultMounts()},
		{name: "termination log and /etc/hosts: skipped", mounts: []specs.Mount{
			bind("/dev/termination-log", podDir+"/containers/vm/0a1b2c3d", "rw"),
			bind("/etc/hosts", podDir+"/etc-hosts", "rw"),
			bind("/elsewhere/hosts", podDir+"/etc-hosts", "rw"),
		}},
		{name: "containerd's sandbox files: skipped", mounts: []specs.Mount{
			bind("/etc/hostname", "/var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/5a3d/hostname", "rw"),
			bind("/etc/hosts", "/var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/5a3d/hosts", "rw"),
			bind("/etc/resolv.conf", "/var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/5a3d/resolv.conf", "rw"),
			bind("/dev/shm", "/run/containerd/io.containerd.grpc.v1.cri/sandboxes/5a3d/shm", "rw"),
		}},
		{name: "a pod volume at /etc/resolv.conf is shared", mounts: []specs.Mount{bind("/etc/resolv.conf", vol("dns"), "ro")},
			want: []vmspec.Share{vmspec.NewShare("/etc/resolv.conf", true)}},
		{name: "the last mount of a destination counts: a pod volume over a host dir",
			mounts: []specs.Mount{bind("/data", "/srv/data", "rw"), bind("/data", vol("data"), "rw")},
			want:   []vmspec.Share{vmspec.NewShare("/data", false)}},
		{name: "the last mount of a destination counts: a host dir over a pod volume",
			mounts: []specs.Mount{bind("/data", vol("data"), "rw"), bind("/data", "/srv/data", "rw")},
			errs:   []string{`mounts["/data"]: source "/srv/data" ` + refused}},
		{name: "a bind mount by its options alone", mounts: []specs.Mount{{Destination: "/data", Source: "/srv/data", Options: []string{"rbind"}}},
			errs: []string{`mounts["/data"]: source "/srv/data" ` + refused}},
		{name: "another pod's volume", mounts: []specs.Mount{bind("/data", vmspec.DefaultKubeletRoot+"/pods/0ther-pod/volumes/kubernetes.io~empty-dir/data", "rw")},
			errs: []string{`mounts["/data"]: source "/var/lib/kubelet/pods/0ther-pod/volumes/kubernetes.io~empty-dir/data" ` + refused}},
		{name: "the pod's volumes dir itself", mounts: []specs.Mount{bind("/all", podDir+"/volumes", "rw")},
			errs: []string{`mounts["/all"]: source "` + podDir + `/volumes" ` + refused}},
		{name: "a path that leaves the pod dir", mounts: []specs.Mount{bind("/etc2", podDir+"/volumes/../../../../../etc", "rw")},
			errs: []string{`mounts["/etc2"]: source "` + podDir + `/volumes/../../../../../etc" ` + refused}},
		{name: "the pod's other kubelet dirs", mounts: []specs.Mount{bind("/plugins", podDir+"/plugins/kubernetes.io~empty-dir/x", "rw")},
			errs: []string{`mounts["/plugins"]: source "` + podDir + `/plugins/kubernetes.io~empty-dir/x" ` + refused}},
		{name: "every mount refused is named", mounts: []specs.Mount{bind("/a", "/srv/a", "rw"), bind("/b", "/srv/b", "ro")},
			errs: []string{`mounts["/a"]: source "/srv/a" `, `mounts["/b"]: source "/srv/b" `}},
		{name: "no sandbox UID: no mount is a pod volume", uid: "-", mounts: []specs.Mount{bind("/scratch", vol("scratch"), "rw")},
			errs: []string{`mounts["/scratch"]: source "` + vol("scratch") + `" ` + refused}},
		{name: "a sandbox UID that is no path segment names no pod dir", uid: "..", mounts: []specs.Mount{bind("/x", "/var/lib/kubelet/volumes/x", "rw")},
			errs: []string{`mounts["/x"]: source "/var/lib/kubelet/volumes/x" ` + refused}},
		{name: "the kubelet root of the rules", rules: vmspec.MountRules{KubeletRoot: "/data/kubelet"},
			mounts: []specs.Mount{bind("/a", "/data/kubelet/pods/"+podUID+"/volumes/kubernetes.io~empty-dir/a", "rw"), bind("/b", vol("b"), "rw")},
			want:   []vmspec.Share{vmspec.NewShare("/a", false)},
			errs:   []string{`mounts["/b"]: source "` + vol("b") + `" ` + refused}},
		{name: "an allowlisted host path and a dir below it", rules: vmspec.MountRules{HostPaths: []string{"/tmp/critest"}},
			mounts: []specs.Mount{bind("/a", "/tmp/critest", "rw"), bind("/b", "/tmp/critest/vol", "ro")},
			want:   []vmspec.Share{vmspec.NewShare("/a", false), vmspec.NewShare("/b", true)}},
		{name: "the allowlist compares whole path segments", rules: vmspec.MountRules{HostPaths: []string{"/tmp/a"}},
			mounts: []specs.Mount{bind("/x", "/tmp/ab", "rw"), bind("/y", "/tmp/a/../b", "rw")},
			errs:   []string{`mounts["/x"]: source "/tmp/ab" ` + refused, `mounts["/y"]: source "/tmp/a/../b" ` + refused}},
		{name: "an image volume of the sandbox, and a dir in it: read-only whatever the mount says",
			mounts: []specs.Mount{bind("/img", img, "rw"), bind("/etc/img", img+"/etc", "ro")},
			want:   []vmspec.Share{vmspec.NewShare("/etc/img", true), vmspec.NewShare("/img", true)}},
		{name: "another sandbox's image volume", mounts: []specs.Mount{bind("/img", imageVols+"/0ther/"+strings.Repeat("ab", 32), "ro")},
			errs: []string{`mounts["/img"]: source "` + imageVols + "/0ther/" + strings.Repeat("ab", 32) + `" ` + refused}},
		{name: "the sandbox's image volumes dir itself, and the runtime's", mounts: []specs.Mount{bind("/all", imageVols+"/0123abcd", "ro"), bind("/every", imageVols, "ro")},
			errs: []string{`mounts["/all"]: source "` + imageVols + `/0123abcd" ` + refused, `mounts["/every"]: source "` + imageVols + `" ` + refused}},
		{name: "an image volume path that leaves the sandbox's dir", mounts: []specs.Mount{bind("/x", imageVols+"/0123abcd/../0ther/x", "ro")},
			errs: []string{`mounts["/x"]: source "` + imageVols + `/0123abcd/../0ther/x" ` + refused}},
		{name: "no sandbox ID: no image volume", sbx: "-", mounts: []specs.Mount{bind("/img", img, "ro")},
			errs: []string{`mounts["/img"]: source "` + img + `" ` + refused}},
		{name: "a sandbox ID that is no path segment names no dir", sbx: "..", mounts: []specs.Mount{bind("/img", imageVols+"/x", "ro")},
			errs: []string{`mounts["/img"]: source "` + imageVols + `/x" ` + refused}},
		{name: "the image volume dirs of the rules", rules: vmspec.MountRules{ImageVolumeRoots: []string{"/var/lib/vmpod/image-volumes", "/data/containerd/io.containerd.grpc.v1.cri/image-volumes"}},
			mounts: []specs.Mount{bind("/a", "/var/lib/vmpod/image-volumes/0123abcd/a", "ro"),
				bind("/b", "/data/containerd/io.containerd.grpc.v1.cri/image-volumes/0123abcd/b/etc", "ro"), bind("/c", img, "ro")},
			want: []vmspec.Share{vmspec.NewShare("/a", true), vmspec.NewShare("/b", true)},
			errs: []string{`mounts["/c"]: source "` + img + `" ` + refused}},
		{name: "no image volume dirs", rules: vmspec.MountRules{ImageVolumeRoots: []string{}}, mounts: []specs.Mount{bind("/img", img, "ro")},
			errs: []string{`mounts["/img"]: source "` + img + `" ` + refused}},
		{name: "an allowlisted host path is no sandbox file", rules: vmspec.MountRules{HostPaths: []string{"/run/containerd"}},
			mounts: []specs.Mount{bind("/etc/resolv.conf", "/run/containerd/io.containerd.grpc.v1.cri/sandboxes/5a3d/resolv.conf", "rw")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			oci := ociSpec(nil)
			for key, v := range map[string]string{vmspec.CRISandboxUID: tt.uid, vmspec.CRISandboxID: tt.sbx} {
				switch v {
				case "":
				case "-":
					delete(oci.Annotations, key)
				default:
					oci.Annotations[key] = v
				}
			}
			oci.Mounts = tt.mounts
			s, err := vmspec.FromOCI(oci, tt.rules)
			checkErr(t, "FromOCI", err, tt.errs)
			if diff := cmp.Diff(tt.want, s.Shares); diff != "" {
				t.Errorf("shares (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFromOCICloudInitSeed: the cloud-init volume is this pod's configMap
// or secret volume, whose mount is the seed and no share; a host dir
// named like one is neither.
func TestFromOCICloudInitSeed(t *testing.T) {
	ann := map[string]string{vmspec.AnnotationCloudInitVolume: "seed"}
	oci := ociSpec(ann)
	oci.Mounts = []specs.Mount{bind("/ci", podDir+"/volumes/kubernetes.io~secret/seed", "ro")}
	s, err := vmspec.FromOCI(oci, vmspec.MountRules{})
	if err != nil {
		t.Fatal(err)
	}
	if s.CloudInit.VolumeMountPath != "/ci" || len(s.Shares) > 0 {
		t.Errorf("cloud-init %+v, shares %+v; want the seed at /ci and no share", s.CloudInit, s.Shares)
	}

	for name, mounts := range map[string][]specs.Mount{
		"a host dir named like the volume": {bind("/ci", "/srv/volumes/kubernetes.io~configmap/seed", "ro")},
		// The kubelet mounts a pod's "ci" and "/ci" both at /ci.
		"the volume hidden by a host dir": {bind("/ci", podDir+"/volumes/kubernetes.io~configmap/seed", "ro"), bind("/ci", "/srv/volumes/kubernetes.io~configmap/seed", "ro")},
	} {
		oci.Mounts = mounts
		_, err = vmspec.FromOCI(oci, vmspec.MountRules{})
		t.Run(name, func(t *testing.T) {
			checkErr(t, "FromOCI", err, []string{
				`vmpod.io/cloud-init-volume: "seed": no configMap or secret volume of that name is mounted`,
				`mounts["/ci"]: source "/srv/volumes/kubernetes.io~configmap/seed" is not a volume of this pod`,
			})
		})
	}
}

func TestMountRulesValidate(t *testing.T) {
	for _, tt := range []struct {
		rules vmspec.MountRules
		want  string // in the error; "" valid
	}{
		{vmspec.MountRules{}, ""},
		{vmspec.MountRules{KubeletRoot: "/data/kubelet", HostPaths: []string{"/tmp", "/srv/shared"}}, ""},
		{vmspec.MountRules{KubeletRoot: "var/lib/kubelet"}, `kubelet root dir "var/lib/kubelet": want a clean absolute path`},
		{vmspec.MountRules{HostPaths: []string{"/tmp/"}}, `host path "/tmp/": want a clean absolute path`},
		{vmspec.MountRules{HostPaths: []string{""}}, `host path "": want a clean absolute path`},
		{vmspec.MountRules{HostPaths: []string{"/"}}, `host path "/": would share the node's whole file system`},
		{vmspec.MountRules{ImageVolumeRoots: []string{"/run/containerd/io.containerd.grpc.v1.cri/image-volumes"}}, ""},
		{vmspec.MountRules{ImageVolumeRoots: []string{"run/x"}}, `image volume dir "run/x": want a clean absolute path`},
		{vmspec.MountRules{ImageVolumeRoots: []string{"/"}}, `image volume dir "/": would share the node's whole file system`},
	} {
		err := tt.rules.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%+v: %v", tt.rules, err)
		case tt.want != "" && (!errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%+v: %v; want InvalidArgument containing %q", tt.rules, err, tt.want)
		}
	}
}

// checkErr fails t unless err holds each of want, as InvalidArgument;
// with no want, unless err is nil.
func checkErr(t *testing.T, door string, err error, want []string) {
	t.Helper()
	if len(want) == 0 {
		if err != nil {
			t.Errorf("%s: %v", door, err)
		}
		return
	}
	if !errdefs.IsInvalidArgument(err) {
		t.Errorf("%s: %v; want InvalidArgument", door, err)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: %v\nwant it to contain %q", door, err, w)
		}
	}
}
