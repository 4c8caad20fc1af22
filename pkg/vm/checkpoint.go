package vm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/vmpod/vmpod/internal/qcow2"
	"github.com/vmpod/vmpod/pkg/convert"
	"github.com/vmpod/vmpod/pkg/virt"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// A checkpoint is these files, flat in one dir: containerd unpacks a
// shim's checkpoint without subdirectories, and a CRI CheckpointPod hands
// an empty dir.
const (
	// CheckpointState is the guest's memory and devices: libvirt's save
	// image, with the domain's definition in its header.
	CheckpointState = "vm.state"
	// CheckpointDisk is the VM's disk overlay as it was at the moment the
	// memory was taken. Its backing file, the image's disk, is not in the
	// checkpoint: the manifest names the image.
	CheckpointDisk = "disk.qcow2"
	// CheckpointManifest is what the checkpoint holds (Manifest), as JSON.
	CheckpointManifest = "vmpod.json"
)

// ManifestVersion is the version of Manifest this code writes and reads.
const ManifestVersion = 1

// Manifest describes a checkpoint: the VM it was taken of, what a node
// restoring it must provide, and each file's size and SHA-256, so a
// truncated or changed file is refused before anything parses it.
type Manifest struct {
	Version int `json:"version"`
	// Domain is the domain's name, which a restore keeps.
	Domain string `json:"domain"`
	// Image is the containerdisk the VM booted from, whose disk the
	// checkpoint's disk overlay lies on.
	Image string `json:"image"`
	// Emulator is the QEMU binary the VM ran on. The accelerator and
	// machine type are the Spec's and the state file's own definition
	// names what they resolved to: a restore needs the same hardware.
	Emulator string `json:"emulator"`
	// Machine is the versioned machine type the VM ran on (pc-q35-7.2
	// for the Spec's q35), which a node's QEMU must offer to load the
	// state: newer QEMUs keep offering the older types for exactly that.
	// A pod that names it (vmpod.io/machine) is placed on such nodes by
	// the scheduler plugin. Empty in checkpoints taken before it was
	// recorded.
	Machine string `json:"machine,omitempty"`
	// MAC is the guest NIC's Ethernet address ("" without a network): a
	// restore gives it to the new pod's interface.
	MAC string `json:"mac,omitempty"`
	// VCPUs and MemoryBytes are the VM's size when it was taken.
	VCPUs       int    `json:"vcpus"`
	MemoryBytes uint64 `json:"memoryBytes"`
	// Spec is the spec the VM was created from.
	Spec vmspec.Spec `json:"spec"`
	// Taken is when the memory was taken; Paused how long the guest's
	// vCPUs stood still for it.
	Taken  time.Time     `json:"taken"`
	Paused time.Duration `json:"pausedNanoseconds"`
	// Files are the checkpoint's other files by name.
	Files map[string]FileSum `json:"files"`
}

// FileSum is one file of a checkpoint.
type FileSum struct {
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// CheckpointResult is what a checkpoint cost.
type CheckpointResult struct {
	Manifest Manifest
	// Paused is how long the guest's vCPUs were stopped by the
	// checkpoint (the memory written, the disk frozen); Total is the
	// whole call, the disk copy and its merge back included.
	Paused, Total time.Duration
}

// topLayer is the disk layer that takes the guest's writes while a
// checkpoint copies the overlay: in VMDir, where the jailed QEMU opens it.
func (l Layout) topLayer() string { return filepath.Join(l.VMDir(), "disk-top.qcow2") }

// Checkpoint writes the running VM's state into dir, an existing empty
// dir, without stopping it: QEMU stays the same process, and the guest's
// vCPUs stop only while its memory is written (an external snapshot),
// then run on while the frozen disk overlay is copied; the writes made
// meanwhile are merged back into the overlay afterwards. A VM that was
// paused is paused again when Checkpoint returns.
//
// Refused with FailedPrecondition, the VM untouched: a VM that does not
// run, one being resized, and one whose guest has state that cannot be
// saved: virtio-fs shares (the pod's volumes) or block volumes, named in
// the error. On any failure the files written into dir are removed and
// the VM runs on its overlay as before.
func (v *VM) Checkpoint(ctx context.Context, dir string) (_ CheckpointResult, retErr error) {
	start := time.Now()
	what := "checkpoint " + v.spec.Name
	if v.machine == nil || v.cgroup == nil {
		return CheckpointResult{}, fmt.Errorf("%s: the VM does not run: %w", what, errdefs.ErrFailedPrecondition)
	}
	if _, stopped := v.machine.Exited(); stopped {
		return CheckpointResult{}, fmt.Errorf("%s: the VM has stopped: %w", what, errdefs.ErrFailedPrecondition)
	}
	if err := checkpointable(v.spec); err != nil {
		return CheckpointResult{}, fmt.Errorf("%s: %w", what, err)
	}
	if !v.resizing.TryLock() {
		return CheckpointResult{}, fmt.Errorf("%s: a resize of the VM is in progress; checkpoint it once that is done: %w", what, errdefs.ErrFailedPrecondition)
	}
	defer v.resizing.Unlock()
	if err := emptyDir(dir); err != nil {
		return CheckpointResult{}, fmt.Errorf("%s: %w", what, err)
	}
	// A checkpoint that did not end (its process died, its merge
	// failed) is finished first, so that the disk is on its overlay.
	if err := v.settleCheckpoint(ctx); err != nil {
		return CheckpointResult{}, fmt.Errorf("%s: an earlier checkpoint of the VM did not end, and finishing it failed: %w", what, err)
	}
	info, err := v.hv.Info(ctx, v.spec.Name)
	if err != nil {
		return CheckpointResult{}, err
	}
	wasPaused := info.State == virt.StatePaused
	size, err := v.hv.Size(ctx, v.spec.Name)
	if err != nil {
		return CheckpointResult{}, err
	}
	// A restore starts the domain as defined from the pod (pkg/convert),
	// with no DIMM, and libvirt refuses the saved state, whose machine has
	// them, as not the same hardware; plugging them back into the
	// definition first is not built. A DIMM VM at its boot size
	// checkpoints as any other.
	if size.DIMMs > 0 {
		return CheckpointResult{}, fmt.Errorf("%s: %d MiB of the guest's RAM is in %d DIMMs plugged live (%s: %s), which a restore cannot put back; resize the pod to its %dMi first: %w",
			what, size.DIMMBytes>>20, size.DIMMs, vmspec.AnnotationMemoryHotplug, vmspec.MemoryHotplugDIMM, v.spec.MemoryBytes>>20, errdefs.ErrFailedPrecondition)
	}

	// Undo: the files in dir go, the VM runs on its overlay again (and
	// runs, unless it was paused), the top layer goes.
	written := []string{}
	defer func() {
		if retErr != nil {
			for _, f := range written {
				os.Remove(filepath.Join(dir, f))
			}
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
			defer cancel()
			if err := v.settleCheckpoint(ctx); err != nil {
				retErr = fmt.Errorf("%w (and its undo: %v; the next checkpoint or a restart of vm-runtime tries again)", retErr, err)
			}
		}
	}()

	written = append(written, CheckpointState)
	c, err := v.capture(ctx, filepath.Join(dir, CheckpointState), !wasPaused)
	if c.snapped.IsZero() {
		return CheckpointResult{}, fmt.Errorf("%s: %w", what, err) // the VM is as it was
	}
	// The guest runs again whatever happened: the disk layers are active
	// again only once it does, and the merge below needs them.
	rerr := v.hv.Resume(context.WithoutCancel(ctx), v.spec.Name)
	paused := time.Since(c.snapped)
	if err != nil {
		return CheckpointResult{}, fmt.Errorf("%s: %w", what, errors.Join(err, rerr))
	}
	if rerr != nil {
		return CheckpointResult{}, rerr
	}
	disk, top, snapped := c.disk, c.top, c.snapped
	if disk != "" {
		// The overlay is frozen (QEMU holds it read-only) until the merge:
		// copy it first.
		written = append(written, CheckpointDisk)
		cerr := copySparse(disk, filepath.Join(dir, CheckpointDisk))
		if err := v.hv.CommitTop(context.WithoutCancel(ctx), v.spec.Name, top); err != nil {
			return CheckpointResult{}, errors.Join(cerr, err)
		}
		if err := os.Remove(top); err != nil {
			return CheckpointResult{}, fmt.Errorf("%s: %v: %w", what, err, errdefs.ErrInternal)
		}
		if cerr != nil {
			return CheckpointResult{}, fmt.Errorf("%s: copy the disk overlay: %v: %w", what, cerr, errdefs.ErrInternal)
		}
	}
	if wasPaused {
		if err := v.hv.Suspend(ctx, v.spec.Name); err != nil {
			return CheckpointResult{}, err
		}
	}
	saved, err := v.hv.SavedDefinition(ctx, filepath.Join(dir, CheckpointState))
	if err != nil {
		return CheckpointResult{}, fmt.Errorf("%s: %w", what, err)
	}
	machine, err := convert.SavedMachine(saved)
	if err != nil {
		return CheckpointResult{}, fmt.Errorf("%s: %w", what, err)
	}

	m := Manifest{Version: ManifestVersion, Domain: v.spec.Name, Image: v.spec.Image, Emulator: v.host.Emulator, Machine: machine,
		VCPUs: size.VCPUs, MemoryBytes: v.spec.MemoryBytes + size.HotplugPluggedBytes, Spec: v.spec, Taken: snapped.UTC(), Paused: paused,
		Files: map[string]FileSum{}}
	if v.pod != nil {
		m.MAC = v.pod.MAC.String()
	}
	for _, f := range written {
		sum, err := sumFile(filepath.Join(dir, f))
		if err != nil {
			return CheckpointResult{}, fmt.Errorf("%s: %v: %w", what, err, errdefs.ErrInternal)
		}
		m.Files[f] = sum
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return CheckpointResult{}, fmt.Errorf("%s: manifest: %v: %w", what, err, errdefs.ErrInternal)
	}
	written = append(written, CheckpointManifest)
	if err := writeNew(filepath.Join(dir, CheckpointManifest), data); err != nil {
		return CheckpointResult{}, fmt.Errorf("%s: %v: %w", what, err, errdefs.ErrInternal)
	}
	if err := v.settleCheckpoint(ctx); err != nil {
		return CheckpointResult{}, fmt.Errorf("%s: %w", what, err)
	}
	return CheckpointResult{Manifest: m, Paused: paused, Total: time.Since(start)}, nil
}

// captured is what capture did: the disk it froze and the layer over it
// that takes the writes ("" for a VM without an overlay), and when it
// asked for the snapshot (zero when it failed before: the VM unchanged).
type captured struct {
	disk, top string
	snapped   time.Time
}

// capture is the part of a checkpoint a crash can interrupt with the VM
// changed: the mark (checkpointMark) written that says so and whether the
// guest is to run again, the top layer made, then the guest's memory
// written to state and its disk switched onto the top layer, which
// leaves the guest paused. Whatever follows, settleCheckpoint undoes
// what the mark names, from Checkpoint itself or, after a crash, Adopt.
func (v *VM) capture(ctx context.Context, state string, resume bool) (captured, error) {
	l := v.layout
	var c captured
	// The mark first: it names the top layer for the undo, whatever
	// follows.
	data, err := json.Marshal(checkpointMark{Resume: resume})
	if err == nil {
		err = writeNew(l.checkpointMark(), data)
	}
	if err != nil {
		return c, fmt.Errorf("%s: %v: %w", l.checkpointMark(), err, errdefs.ErrInternal)
	}
	if _, err := os.Lstat(l.Overlay()); err == nil {
		c.disk, c.top = l.Overlay(), l.topLayer()
		if err := v.makeTopLayer(); err != nil {
			return c, err
		}
	}
	c.snapped = time.Now()
	err = v.hv.Snapshot(ctx, v.spec.Name, virt.SnapshotRequest{StateFile: state, Disk: c.disk, Top: c.top, Emulator: v.host.Emulator})
	return c, err
}

// checkpointMark is the mark a checkpoint leaves in the VM dir while it
// has the VM changed (capture).
type checkpointMark struct {
	// Resume: the guest ran when the checkpoint began, so it is to run
	// again however the checkpoint ends.
	Resume bool `json:"resume"`
}

// settleTimeout bounds a settleCheckpoint that undoes a failed checkpoint
// or follows an Adopt: the merge of what the guest wrote meanwhile.
const settleTimeout = 2 * time.Minute

func (l Layout) checkpointMark() string { return filepath.Join(l.VMDir(), "checkpointing.json") }

// settleCheckpoint finishes a checkpoint that left its mark: the disk goes
// back onto its overlay (the top layer's writes merged into it), the top
// layer goes, a guest that ran runs again, and the mark goes last. Each
// step is one that can be done again, so a crash in the middle of it
// leaves the mark for the next try. Without a mark it does nothing.
func (v *VM) settleCheckpoint(ctx context.Context) error {
	l := v.layout
	data, err := os.ReadFile(l.checkpointMark())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var mark checkpointMark
	if err == nil {
		err = json.Unmarshal(data, &mark)
	}
	if err != nil {
		return fmt.Errorf("%s: %v: %w", l.checkpointMark(), err, errdefs.ErrInternal)
	}
	if _, err := os.Lstat(l.topLayer()); err == nil {
		// The merge needs the guest running: the snapshot's pause keeps
		// the disk layers read-only. A guest paused before the checkpoint
		// runs for the merge and is paused again.
		if err := v.hv.Resume(ctx, v.spec.Name); err != nil {
			return err
		}
		// Nil at once when the disk never went onto the top layer.
		if err := v.hv.CommitTop(ctx, v.spec.Name, l.topLayer()); err != nil {
			return err
		}
		if err := os.Remove(l.topLayer()); err != nil {
			return fmt.Errorf("%v: %w", err, errdefs.ErrInternal)
		}
		if !mark.Resume {
			if err := v.hv.Suspend(ctx, v.spec.Name); err != nil {
				return err
			}
		}
	}
	if mark.Resume {
		if err := v.hv.Resume(ctx, v.spec.Name); err != nil {
			return err
		}
	}
	if err := os.Remove(l.checkpointMark()); err != nil {
		return fmt.Errorf("%v: %w", err, errdefs.ErrInternal)
	}
	return nil
}

// checkpointable refuses a spec whose guest holds state a checkpoint
// cannot carry: what a virtio-fs share's file server holds (libvirt
// refuses to save a domain with one) and what a block volume holds
// (outside the VM, on the node's device).
func checkpointable(s vmspec.Spec) error {
	var why []string
	if len(s.Shares) > 0 {
		paths := make([]string, len(s.Shares))
		for i, sh := range s.Shares {
			paths[i] = sh.MountPath
		}
		why = append(why, fmt.Sprintf("its guest mounts pod volumes over virtio-fs (%s), whose state cannot be saved; "+
			"a pod without volumes can be checkpointed (automountServiceAccountToken: false drops the service account token's)",
			strings.Join(paths, ", ")))
	}
	if len(s.Volumes) > 0 {
		names := make([]string, len(s.Volumes))
		for i, vol := range s.Volumes {
			names[i] = vol.Name
		}
		why = append(why, fmt.Sprintf("it has block volumes (%s), whose data a checkpoint cannot carry", strings.Join(names, ", ")))
	}
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %w", strings.Join(why, "; and "), errdefs.ErrFailedPrecondition)
}

// emptyDir checks that dir is an existing, empty dir.
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("checkpoint dir: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if len(entries) > 0 {
		return fmt.Errorf("checkpoint dir %s is not empty (%s): %w", dir, entries[0].Name(), errdefs.ErrInvalidArgument)
	}
	return nil
}

// makeTopLayer writes the empty top layer over the overlay, QEMU's own
// like the overlay (createOverlay: never through a link; the VM dir is
// root's, so QEMU cannot have put anything in its place).
func (v *VM) makeTopLayer() error {
	l := v.layout
	f, err := os.Open(l.Overlay())
	if err != nil {
		return fmt.Errorf("disk overlay: %v: %w", err, errdefs.ErrInternal)
	}
	defer f.Close()
	h, err := qcow2.ReadHeader(f)
	if err != nil {
		return fmt.Errorf("disk overlay: %v: %w", err, errdefs.ErrInternal)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("disk overlay: %v: %w", err, errdefs.ErrInternal)
	}
	// QEMU's uid owns the overlay (jail.Spec.Owned), on an adopted VM too.
	return createOverlay(l.Overlay(), "qcow2", h.Size, l.topLayer(), st.Uid, st.Gid)
}

// copySparse copies src to a new file dst, leaving holes where src has
// zeros, so a sparse overlay stays sparse.
func copySparse(src, dst string) (retErr error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if err := out.Close(); retErr == nil {
			retErr = err
		}
	}()
	buf := make([]byte, 1<<20)
	zero := make([]byte, len(buf))
	var off int64
	for {
		n, err := io.ReadFull(in, buf)
		if n > 0 {
			if !bytes.Equal(buf[:n], zero[:n]) {
				if _, err := out.WriteAt(buf[:n], off); err != nil {
					return err
				}
			}
			off += int64(n)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	if err := out.Truncate(off); err != nil {
		return err
	}
	return out.Sync()
}

// sumFile is the size and SHA-256 of a file.
func sumFile(path string) (FileSum, error) {
	f, err := os.Open(path)
	if err != nil {
		return FileSum{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return FileSum{}, err
	}
	return FileSum{Bytes: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// writeNew writes data to a new file at path, synced.
func writeNew(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
