//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The guest's disk of a volumeDevices entry whose devicePath is
// /dev/data carries the serial "data" (vmspec: a volume's serial is its
// device path's base name); the test guest has no udev, so the script
// finds it in sysfs and prints its device node.
const findDataDisk = `d=; for b in /sys/block/vd*; do [ "$(cat "$b/serial" 2>/dev/null)" = data ] && d=/dev/${b##*/}; done
[ -b "$d" ] || { echo "no disk with serial data: $(ls /sys/block)" >&2; exit 1; }
`

// TestBlockPV: a VM pod's volumeDevices claim is a disk of its guest,
// backed by a real PersistentVolume (hack/local-up.sh's StorageClass
// vmpod-local-block: local PVs of volumeMode Block over loop devices), on
// both kinds of node. A StatefulSet of one VM with a volumeClaimTemplate
// writes to its disk; the data is there after the VM restarts in place
// (the guest powers off, the kubelet restarts the container), after the
// pod is deleted and the StatefulSet makes a new one (scheduled again:
// to the same node, where the local PV lives), and, once the StatefulSet
// is gone, for a bare pod of the same claim. The node reads what the
// guest wrote on the PV's device, and the kubelet's mapping of it is gone
// once no pod uses it.
func TestBlockPV(t *testing.T) {
	checkLeaks(t)
	class := os.Getenv("VMPOD_E2E_BLOCK_CLASS")
	if class == "" {
		t.Fatal("VMPOD_E2E_BLOCK_CLASS is unset: the StorageClass of block PersistentVolumes hack/local-up.sh makes (source _output/local/env)")
	}
	for _, d := range frontDoors(t) {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			d.testBlockPV(t, class)
		})
	}
}

func (d frontDoor) testBlockPV(t *testing.T, class string) {
	ctx := context.Background()
	name := uniqueName("blk")
	claim := "disk-" + name + "-0" // the StatefulSet's claim of member 0
	mark := "vmpod-" + name
	// At cleanup (after the pods are gone: registered first, run last):
	// the claim goes, and its PV, Released under Retain, is offered again.
	t.Cleanup(func() { releaseClaim(t, claim) })

	sel := map[string]string{"app": name}
	tmpl := vmTemplate(sel)
	d.place(&tmpl.Spec)
	tmpl.Spec.Containers[0].VolumeDevices = []corev1.VolumeDevice{{Name: "disk", DevicePath: "/dev/data"}}
	block := corev1.PersistentVolumeBlock
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: appsv1.StatefulSetSpec{
			Replicas: new(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: sel}, Template: tmpl,
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "disk"},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					VolumeMode:  &block, StorageClassName: &class,
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("32Mi")}},
				},
			}},
		},
	}
	set := client.AppsV1().StatefulSets(namespace)
	if _, err := set.Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deleteAtCleanup(t, "statefulset", name, sel, set.Delete)
	start := time.Now()
	waitStatefulSet(t, name, 1)
	member := name + "-0"
	t.Logf("StatefulSet of a VM with a block PV Ready in %v", time.Since(start).Round(100*time.Millisecond))
	dev := d.pvDevice(t, claim)

	// The guest's disk is the PV: 64 MiB, and what the guest writes the
	// node reads on the PV's device.
	out := guestExec(t, member, "sh", "-c", findDataDisk+`cat /sys/block/${d#/dev/}/size
printf %s "$0" | dd of="$d" bs=512 conv=sync,fsync 2>/dev/null && echo written`, mark)
	if want := fmt.Sprintf("%d\nwritten\n", 64<<20/512); out != want {
		t.Fatalf("the guest's disk of the claim: %q, want its size in sectors and the write: %q", out, want)
	}
	if got, err := d.node.run(ctx, `head -c "$2" "$1"`, dev, fmt.Sprint(len(mark))); err != nil || got != mark {
		t.Errorf("the node reads %q from the PV's device %s (%v), want the guest's %q", got, dev, err, mark)
	}

	// A restart in place: the guest powers off, the kubelet starts the
	// container (the VM) again, with the same disk.
	uid := getPod(t, member).UID
	start = time.Now()
	_, _, _, _ = kubectlNoFatal(20*time.Second, "exec", member, "--", "/bin/guest-poweroff")
	if !poll(bootTimeout, func() bool {
		p := getPod(t, member)
		return p.UID == uid && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount > 0 && p.Status.ContainerStatuses[0].Ready
	}) {
		t.Fatalf("%s: not restarted and Ready within %v of its guest's poweroff: %+v", member, bootTimeout, getPod(t, member).Status.ContainerStatuses)
	}
	d.readMark(t, member, mark, "after the VM restarted in place")
	t.Logf("restarted in place (guest poweroff to Ready) in %v", time.Since(start).Round(100*time.Millisecond))
	start = time.Now()

	// The pod deleted: the StatefulSet makes a new one, scheduled again,
	// with the same claim.
	if err := client.CoreV1().Pods(namespace).Delete(ctx, member, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if !poll(deleteTimeout, func() bool {
		p, err := client.CoreV1().Pods(namespace).Get(ctx, member, metav1.GetOptions{})
		return err == nil && p.UID != uid
	}) {
		t.Fatalf("%s: no new pod under its name within %v of its deletion", member, deleteTimeout)
	}
	waitStatefulSet(t, name, 1)
	d.readMark(t, member, mark, "in the StatefulSet's new pod")
	t.Logf("the StatefulSet's new pod Ready, with the disk, %v after the deletion", time.Since(start).Round(100*time.Millisecond))
	mark2 := mark + "-2"
	guestExec(t, member, "sh", "-c", findDataDisk+`printf %s "$0" | dd of="$d" bs=512 conv=sync,fsync 2>/dev/null`, mark2)

	// The StatefulSet gone, a bare pod of the claim reads it.
	fg := metav1.DeletePropagationForeground
	if err := set.Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
		t.Fatal(err)
	}
	waitNoPods(t, sel)
	b := makePod("blk").grace(10)
	d.place(&b.pod.Spec)
	b.pod.Spec.Volumes = []corev1.Volume{{Name: "disk", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
	b.pod.Spec.Containers[0].VolumeDevices = []corev1.VolumeDevice{{Name: "disk", DevicePath: "/dev/data"}}
	pod := create(t, b.obj())
	waitRunning(t, pod.Name)
	waitLog(t, pod.Name, "VMPOD-GUEST: ready")
	d.readMark(t, pod.Name, mark2, "in a bare pod of the claim")
	deletePod(t, pod.Name)

	// No pod maps the PV: the kubelet's loop device on it is gone.
	var held string
	if !poll(time.Minute, func() bool {
		held, _ = d.node.run(ctx, `losetup -j "$1"`, dev)
		return held == ""
	}) {
		t.Errorf("the PV's device %s is still held after its last pod: %s", dev, held)
	}
}

// readMark checks that the guest of pod reads mark at the start of its
// data disk.
func (d frontDoor) readMark(t *testing.T, pod, mark, when string) {
	t.Helper()
	out := guestExec(t, pod, "sh", "-c", findDataDisk+`dd if="$d" bs=512 count=1 2>/dev/null | head -c "$0"`, fmt.Sprint(len(mark)))
	if out != mark {
		t.Errorf("%s: the guest reads %q from its disk, want %q", when, out, mark)
	}
}

// pvDevice is the node's block device of the PV bound to claim.
func (d frontDoor) pvDevice(t *testing.T, claim string) string {
	t.Helper()
	pvc, err := client.CoreV1().PersistentVolumeClaims(namespace).Get(context.Background(), claim, metav1.GetOptions{})
	if err != nil || pvc.Spec.VolumeName == "" {
		t.Fatalf("claim %s: not bound (%v)", claim, err)
	}
	pv, err := client.CoreV1().PersistentVolumes().Get(context.Background(), pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pv.Spec.Local == nil {
		t.Fatalf("PV %s of claim %s is not a local PV: %+v", pv.Name, claim, pv.Spec.PersistentVolumeSource)
	}
	if want := nodeName(t, d); !pvOnNode(pv, want) {
		t.Errorf("claim %s bound to PV %s, not one of node %s: %+v", claim, pv.Name, want, pv.Spec.NodeAffinity)
	}
	return pv.Spec.Local.Path
}

// pvOnNode: the PV's node affinity names the node by its hostname label.
func pvOnNode(pv *corev1.PersistentVolume, node string) bool {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return false
	}
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		for _, e := range term.MatchExpressions {
			if e.Key == corev1.LabelHostname && e.Operator == corev1.NodeSelectorOpIn && slices.Equal(e.Values, []string{node}) {
				return true
			}
		}
	}
	return false
}

// nodeName is the name of the door's node.
func nodeName(t *testing.T, d frontDoor) string {
	if d.node.name != "" {
		return d.node.name
	}
	return vmpodNode(t)
}

// releaseClaim deletes a claim and makes its PV, Released under Retain,
// Available again (as the local static provisioner does once it has
// wiped it), so that the next run finds the cluster's PVs offered.
func releaseClaim(t *testing.T, claim string) {
	ctx := context.Background()
	pvc, err := client.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, claim, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		t.Errorf("claim %s: %v", claim, err)
		return
	}
	if err := client.CoreV1().PersistentVolumeClaims(namespace).Delete(ctx, claim, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete claim %s: %v", claim, err)
		return
	}
	pvName := pvc.Spec.VolumeName
	if pvName == "" {
		return
	}
	var phase corev1.PersistentVolumePhase
	if !poll(deleteTimeout, func() bool {
		pv, err := client.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
		if err != nil {
			return false
		}
		phase = pv.Status.Phase
		return phase == corev1.VolumeReleased || phase == corev1.VolumeAvailable
	}) {
		t.Errorf("PV %s: %s, not Released %v after its claim's deletion", pvName, phase, deleteTimeout)
		return
	}
	patch := []byte(`{"spec":{"claimRef":null}}`)
	if _, err := client.CoreV1().PersistentVolumes().Patch(ctx, pvName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Errorf("PV %s: offer it again: %v", pvName, err)
	}
}
