package vm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"golang.org/x/sys/unix"

	"github.com/vmpod/vmpod/internal/qcow2"
	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/podnet"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// maxManifestBytes bounds what ReadCheckpoint reads of a manifest.
const maxManifestBytes = 1 << 20

// ReadCheckpoint reads the manifest of the checkpoint in dir and checks it
// before anything else reads the checkpoint: the version is this code's,
// and every file it lists is there with its size and SHA-256 (a truncated
// or altered file is refused here, before libvirt or QEMU parse it), and
// nothing it does not list. Refusals are InvalidArgument and name the
// file.
func ReadCheckpoint(dir string) (Manifest, error) {
	bad := func(format string, a ...any) (Manifest, error) {
		return Manifest{}, fmt.Errorf("checkpoint %s: %s: %w", dir, fmt.Sprintf(format, a...), errdefs.ErrInvalidArgument)
	}
	f, err := os.OpenFile(filepath.Join(dir, CheckpointManifest), os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return bad("%v", err)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxManifestBytes+1))
	f.Close()
	switch {
	case err != nil:
		return bad("%s: %v", CheckpointManifest, err)
	case len(data) > maxManifestBytes:
		return bad("%s is larger than %d bytes", CheckpointManifest, maxManifestBytes)
	}
	var m Manifest
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return bad("%s: %v", CheckpointManifest, err)
	}
	if m.Version != ManifestVersion {
		return bad("%s version %d; this vmpod reads version %d", CheckpointManifest, m.Version, ManifestVersion)
	}
	if _, ok := m.Files[CheckpointState]; !ok {
		return bad("%s lists no %s", CheckpointManifest, CheckpointState)
	}
	if err := m.Spec.Validate(); err != nil {
		return bad("%s: the spec: %v", CheckpointManifest, err)
	}
	if m.Domain != m.Spec.Name {
		return bad("%s: domain %q, spec %q", CheckpointManifest, m.Domain, m.Spec.Name)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return bad("%v", err)
	}
	for _, e := range entries {
		if _, listed := m.Files[e.Name()]; !listed && e.Name() != CheckpointManifest && e.Name() != CheckpointSignature {
			return bad("%s is not in its manifest", e.Name())
		}
	}
	for name, want := range m.Files {
		if name != CheckpointState && name != CheckpointDisk {
			return bad("%s lists an unknown file %q", CheckpointManifest, name)
		}
		got, err := sumRegular(filepath.Join(dir, name))
		if err != nil {
			return bad("%s: %v", name, err)
		}
		if got != want {
			return bad("%s has %d bytes, sha256 %s; its manifest says %d bytes, sha256 %s (truncated or altered)",
				name, got.Bytes, got.SHA256, want.Bytes, want.SHA256)
		}
	}
	return m, nil
}

// sumRegular is sumFile of a regular file, not followed through a link.
func sumRegular(path string) (FileSum, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return FileSum{}, err
	}
	if !fi.Mode().IsRegular() {
		return FileSum{}, fmt.Errorf("a %s, not a regular file", fi.Mode().Type())
	}
	return sumFile(path)
}

// checkRestorable refuses to restore m into a VM of spec s when the
// virtual hardware would differ: libvirt would refuse it anyway, later
// and less clearly. The pod's name and image may differ (a checkpoint
// image is another image over the same disk; restoreOverlay checks the
// disk's size); the VM keeps the checkpoint's domain name (its hardware
// identity).
func checkRestorable(m Manifest, s vmspec.Spec) error {
	c := m.Spec
	var diffs []string
	diff := func(what string, saved, here any) {
		diffs = append(diffs, fmt.Sprintf("%s %v, the pod asks %v", what, saved, here))
	}
	if c.VCPUs != s.VCPUs || c.MaxVCPUs != s.MaxVCPUs {
		diff("vCPUs (and maximum)", fmt.Sprintf("%d (%d)", c.VCPUs, c.MaxVCPUs), fmt.Sprintf("%d (%d)", s.VCPUs, s.MaxVCPUs))
	}
	if c.MemoryBytes != s.MemoryBytes || c.MaxMemoryBytes != s.MaxMemoryBytes {
		diff("memory bytes (and maximum)", fmt.Sprintf("%d (%d)", c.MemoryBytes, c.MaxMemoryBytes), fmt.Sprintf("%d (%d)", s.MemoryBytes, s.MaxMemoryBytes))
	}
	// The room is one virtio-mem device or DIMM slots: other hardware.
	if c.DIMMs() != s.DIMMs() {
		diff(vmspec.AnnotationMemoryHotplug, c.MemoryHotplug, s.MemoryHotplug)
	}
	// The pod may name the versioned machine type the checkpoint's spec
	// resolved to (what the scheduler places it by).
	sameMachine := c.Machine == s.Machine || (m.Machine != "" && s.Machine == m.Machine)
	if c.Accel != s.Accel || !sameMachine || !reflect.DeepEqual(c.CPU, s.CPU) || c.Firmware != s.Firmware || c.DiskBus != s.DiskBus {
		diff("platform (accelerator, machine, CPU, firmware, disk bus)",
			fmt.Sprintf("%s %q %+v %s %s", c.Accel, c.Machine, c.CPU, c.Firmware, c.DiskBus),
			fmt.Sprintf("%s %q %+v %s %s", s.Accel, s.Machine, s.CPU, s.Firmware, s.DiskBus))
	}
	if len(c.NICs) != len(s.NICs) || c.Console != s.Console || (c.CloudInit == nil) != (s.CloudInit == nil) {
		diff("devices (NICs, console, cloud-init seed)",
			fmt.Sprintf("%d %t %t", len(c.NICs), c.Console, c.CloudInit != nil),
			fmt.Sprintf("%d %t %t", len(s.NICs), s.Console, s.CloudInit != nil))
	}
	if len(diffs) == 0 {
		return nil
	}
	return fmt.Errorf("the checkpoint was taken of another VM: %s: %w", strings.Join(diffs, "; "), errdefs.ErrFailedPrecondition)
}

// checkNodeMachine refuses a checkpoint taken on a machine type this
// node's QEMU does not offer (another QEMU version's), before libvirt or
// QEMU read anything: they would refuse it later and less clearly. The
// pod can name the type, and the scheduler plugin then places it on a
// node that offers it. machine "" (an older checkpoint) or a node that
// lists no types is not checked.
func checkNodeMachine(machine string, h host.Host) error {
	if machine == "" || len(h.Machines) == 0 || slices.Contains(h.Machines, machine) {
		return nil
	}
	return fmt.Errorf("the checkpoint's VM ran on machine type %s, which this node's QEMU (%s) does not offer; "+
		"give the pod the annotation %s: %q, and the scheduler places it on a node labelled %s%s=true: %w",
		machine, h.Emulator, vmspec.AnnotationMachine, machine, vmspec.LabelMachinePrefix, machine, errdefs.ErrFailedPrecondition)
}

// restoreOverlay copies a checkpoint's disk overlay to the VM's overlay,
// for QEMU's uid as createOverlay makes one. The checkpoint's overlay
// must be a qcow2 of the image disk's size; the backing file its header
// names (the disk on the node it was taken on) is not followed: the
// domain names the chain.
func restoreOverlay(from string, size uint64, overlay string, uid, gid uint32) (retErr error) {
	fail := func(err error) error {
		return fmt.Errorf("disk overlay from checkpoint %s: %v: %w", from, err, errdefs.ErrInvalidArgument)
	}
	f, err := os.OpenFile(from, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fail(err)
	}
	h, err := qcow2.ReadHeader(f)
	f.Close()
	switch {
	case err != nil:
		return fail(err)
	case h.Size != (size+511)&^511:
		return fail(fmt.Errorf("virtual size %d, the image's disk %d: not the image it was taken over", h.Size, size))
	case h.IncompatFeatures&qcow2.IncompatDataFile != 0:
		return fail(errors.New("has an external data file"))
	}
	if err := copySparse(from, overlay); err != nil {
		os.Remove(overlay)
		return fmt.Errorf("disk overlay from checkpoint %s: %v: %w", from, err, errdefs.ErrInternal)
	}
	if err := os.Chown(overlay, int(uid), int(gid)); err != nil {
		os.Remove(overlay)
		return fmt.Errorf("disk overlay: %v: %w", err, errdefs.ErrInternal)
	}
	return nil
}

// guestClockSync bounds how long a restored VM's Start tries to set the
// guest's clock: the agent may take a moment to answer after a restore.
const guestClockSync = 5 * time.Second

// syncGuestClock sets the guest's clock to now after a restore: the
// guest's clock stood still while it was saved. Best effort: a guest
// without an agent keeps its clock, and NTP in it catches up.
func (v *VM) syncGuestClock(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, guestClockSync)
	defer cancel()
	for {
		cmd := fmt.Sprintf(`{"execute":"guest-set-time","arguments":{"time":%d}}`, time.Now().UnixNano())
		if _, err := v.hv.AgentCommand(ctx, v.spec.Name, cmd, time.Second); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(resizePoll):
		}
	}
}

// restoreState is where a VM restored beside another of the same state
// gets its own copy of the state file (From.Beside) until Start.
func (l Layout) restoreState() string { return filepath.Join(l.VMDir(), "restore.state") }

// guestMACWait bounds how long a restored Start waits for the guest's
// agent to give the guest the pod's MAC (it answers about 0.7 s after a
// restore under TCG).
const guestMACWait = 30 * time.Second

// takePodMAC gives the restored guest the pod's MAC in place of the one
// it was saved with, which another pod of this node has: the guest's NIC
// (its agent names it by the saved MAC) is set to the pod's address with
// ip(8), through the agent, while its link is still down. Until then the
// pod interface drops what the guest sends (only the pod's MAC passes),
// so the MAC is never seen twice outside. A guest without an agent, or
// without ip, cannot be restored beside another: the error says so.
func (m *Machine) takePodMAC(ctx context.Context) error {
	what := fmt.Sprintf("give the guest of %s this pod's MAC %s in place of %s, which another pod of the same checkpoint on this node has", m.name, m.podMAC, m.guestMAC)
	ctx, cancel := context.WithTimeout(ctx, guestMACWait)
	defer cancel()
	var ifaces []struct {
		Name string `json:"name"`
		MAC  string `json:"hardware-address"`
	}
	for {
		err := m.agent(ctx, "guest-network-get-interfaces", nil, &ifaces)
		if err == nil {
			break
		}
		if !errdefs.IsUnavailable(err) && !errdefs.IsFailedPrecondition(err) && !errdefs.IsDeadlineExceeded(err) || ctx.Err() != nil {
			return fmt.Errorf("%s: the guest agent does not answer (%v); a checkpoint restores into a second pod of a node only with a guest agent: %w",
				what, err, errdefs.ErrFailedPrecondition)
		}
		select {
		case <-ctx.Done():
		case <-time.After(resizePoll):
		}
	}
	name := ""
	for _, i := range ifaces {
		if mac, err := net.ParseMAC(i.MAC); err == nil && bytes.Equal(mac, m.guestMAC) {
			name = i.Name
		}
	}
	if name == "" {
		return fmt.Errorf("%s: the guest has no interface with MAC %s (its agent reports %d): %w", what, m.guestMAC, len(ifaces), errdefs.ErrFailedPrecondition)
	}
	res, err := m.Exec(ctx, ExecRequest{Args: []string{"ip", "link", "set", "dev", name, "address", m.podMAC}})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("%s: ip link set dev %s address %s exited %d: %s: %w", what, name, m.podMAC, res.ExitCode,
			firstLine(append(res.Stderr, res.Stdout...)), errdefs.ErrFailedPrecondition)
	}
	return nil
}

// leaseWait is how long after a restore a guest has to lease its new pod's
// address before the console says it has not: a DHCP client that follows
// the carrier asks within a few seconds of the link coming back.
var leaseWait = 20 * time.Second

// watchLease tells the pod's console, and the log, when the guest restored
// at restored has not leased the pod's address leaseWait after: it keeps
// the address it had on the network it was saved on, and Services do not
// reach it (docs/day2.md). Nothing when it did, or when the VM stopped.
func (v *VM) watchLease(a *podnet.Attachment, restored time.Time) {
	select {
	case <-v.machine.exited:
		return
	case <-time.After(time.Until(restored.Add(relinkAfter + leaseWait))):
	}
	if !a.Leased().Before(restored) {
		return
	}
	msg := fmt.Sprintf("vmpod: the restored guest has not asked for this pod's address %s in the %v since its link came back: "+
		"it keeps the one it had where it was saved, and Services do not reach it; its DHCP client must follow the carrier (docs/day2.md)",
		v.pod.Addr.Addr(), leaseWait)
	log.L.WithField("vm", v.spec.Name).Warn(msg)
	v.machine.say(msg)
}
