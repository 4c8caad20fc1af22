package libvirt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	lv "libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/vmpod/vmpod/pkg/virt"
)

// Snapshot implements virt.Hypervisor with an external snapshot of memory
// and disk: QEMU stays, the memory is written to the state file (libvirt
// hands QEMU a pipe to its iohelper, so QEMU never sees the file's path)
// and the disk switches onto the Top the caller made (REUSE_EXT: libvirt
// neither creates nor formats it, so the jailed QEMU opens a file of its
// own uid). Nothing is recorded in libvirt's root (NO_METADATA). Every
// disk but req.Disk is named snapshot='no': libvirt would otherwise give
// each an external overlay of its own making next to its file.
func (c *Conn) Snapshot(ctx context.Context, name string, req virt.SnapshotRequest) error {
	what := "snapshot " + subject(name)
	switch {
	case req.StateFile == "":
		return fmt.Errorf("%s: %w: no state file", what, errdefs.ErrInvalidArgument)
	case req.Disk != "" && req.Top == "":
		return fmt.Errorf("%s: %w: disk %s has no top layer to write to", what, errdefs.ErrInvalidArgument, req.Disk)
	}
	if _, err := os.Lstat(req.StateFile); !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s: %w: state file %s exists", what, errdefs.ErrInvalidArgument, req.StateFile)
	}
	d, st, dom, err := c.runningQEMU(ctx, name, what, "keeps no memory")
	if err != nil {
		return err
	}
	defer d.Free()
	snap, err := snapshotXML(dom, req)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	// Paused first: libvirt would pause a running domain itself and let
	// it run again as soon as the memory is written, before the caller
	// could copy the frozen disk.
	if st == virt.StateRunning {
		if err := d.Suspend(); err != nil {
			return classify(err, what)
		}
	}
	s, err := d.CreateSnapshotXML(snap, lv.DOMAIN_SNAPSHOT_CREATE_NO_METADATA|
		lv.DOMAIN_SNAPSHOT_CREATE_REUSE_EXT|lv.DOMAIN_SNAPSHOT_CREATE_ATOMIC)
	if err != nil {
		return classify(err, what)
	}
	if err := s.Free(); err != nil {
		return classify(err, what)
	}
	if req.Emulator == "" {
		return nil
	}
	return c.renameEmulator(req.StateFile, req.Emulator)
}

// renameEmulator has the definition in the state file name emulator.
// libvirt rewrites it in place (it leaves 64 KiB of room after the
// definition for this), after checking that the new definition describes
// the same guest, which the emulator's path is not part of; it parses the
// old one first, so this runs where the old emulator exists: on the node
// that wrote the file.
func (c *Conn) renameEmulator(file, emulator string) error {
	what := "state file " + file + ": name emulator " + emulator
	x, err := c.conn.DomainSaveImageGetXMLDesc(file, lv.DOMAIN_SAVE_IMAGE_XML_SECURE)
	if err != nil {
		return classify(err, what)
	}
	var dom libvirtxml.Domain
	if err := dom.Unmarshal(x); err != nil {
		return fmt.Errorf("%s: %w: %v", what, errdefs.ErrInternal, err)
	}
	if dom.Devices == nil {
		return fmt.Errorf("%s: %w: the definition has no devices", what, errdefs.ErrInternal)
	}
	dom.Devices.Emulator = emulator
	if x, err = dom.Marshal(); err != nil {
		return fmt.Errorf("%s: %w: %v", what, errdefs.ErrInternal, err)
	}
	return classify(c.conn.DomainSaveImageDefineXML(file, x, 0), what)
}

// runningQEMU looks up a running or paused domain for an operation (what)
// that needs QEMU, and reads its live definition: FailedPrecondition when
// it does not run, NotImplemented on the test driver, which lacks what
// the operation needs. The caller frees d.
func (c *Conn) runningQEMU(ctx context.Context, name, what, lacks string) (*lv.Domain, virt.State, *libvirtxml.Domain, error) {
	d, st, err := c.domainState(ctx, name)
	if err != nil {
		return nil, st, nil, err
	}
	fail := func(err error) (*lv.Domain, virt.State, *libvirtxml.Domain, error) {
		d.Free()
		return nil, st, nil, err
	}
	if !st.Active() {
		return fail(fmt.Errorf("%s: %w: %s", what, errdefs.ErrFailedPrecondition, st))
	}
	if c.root == "" {
		return fail(fmt.Errorf("%s: %w: the test driver %s", what, errdefs.ErrNotImplemented, lacks))
	}
	dom, _, err := liveDefinition(d, name)
	if err != nil {
		return fail(err)
	}
	return d, st, dom, nil
}

// snapshotXML is the snapshot of req for the live definition dom.
func snapshotXML(dom *libvirtxml.Domain, req virt.SnapshotRequest) (string, error) {
	s := libvirtxml.DomainSnapshot{
		Memory: &libvirtxml.DomainSnapshotMemory{Snapshot: "external", File: req.StateFile},
		Disks:  &libvirtxml.DomainSnapshotDisks{},
	}
	found := false
	if dom.Devices != nil {
		for _, disk := range dom.Devices.Disks {
			if disk.Target == nil {
				continue
			}
			sd := libvirtxml.DomainSnapshotDisk{Name: disk.Target.Dev, Snapshot: "no"}
			if req.Disk != "" && fileOf(disk.Source) == req.Disk {
				found = true
				sd.Snapshot = "external"
				sd.Driver = &libvirtxml.DomainDiskDriver{Type: "qcow2"}
				sd.Source = &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: req.Top}}
			}
			s.Disks.Disks = append(s.Disks.Disks, sd)
		}
	}
	if req.Disk != "" && !found {
		return "", fmt.Errorf("%w: the domain has no disk on %s", errdefs.ErrInvalidArgument, req.Disk)
	}
	x, err := s.Marshal()
	if err != nil {
		return "", fmt.Errorf("%w: snapshot XML: %v", errdefs.ErrInternal, err)
	}
	return x, nil
}

// commitPoll is how often CommitTop asks whether the merge is done.
const commitPoll = 20 * time.Millisecond

// CommitTop implements virt.Hypervisor with an active block commit that
// stops at the file right below the top (SHALLOW, and that file named as
// the base: the commit can never reach the read-only image layer below
// it), then a pivot once the job is ready. Cancelled by ctx, the job is
// abandoned and the disk stays on its top layer.
func (c *Conn) CommitTop(ctx context.Context, name, top string) error {
	what := fmt.Sprintf("commit %s into the disk below it in %s", top, subject(name))
	d, _, dom, err := c.runningQEMU(ctx, name, what, "has no block jobs")
	if err != nil {
		return err
	}
	defer d.Free()
	target, base, err := belowTop(dom, top)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if target == "" {
		return nil // no disk is on top: nothing to merge
	}
	if err := d.BlockCommit(target, base, "", 0, lv.DOMAIN_BLOCK_COMMIT_ACTIVE|lv.DOMAIN_BLOCK_COMMIT_SHALLOW); err != nil {
		return classify(err, what)
	}
	for {
		info, err := d.GetBlockJobInfo(target, 0)
		switch {
		case err != nil:
			return classify(err, what)
		case info.Type == 0:
			return fmt.Errorf("%s: %w: the job ended before it was ready (QEMU's log may say why)", what, errdefs.ErrInternal)
		case info.End > 0 && info.Cur == info.End:
			// All copied; the pivot waits for QEMU's word that the job is
			// ready, which reaches libvirt as an event, a moment later.
			err := d.BlockJobAbort(target, lv.DOMAIN_BLOCK_JOB_ABORT_PIVOT)
			if code(err) != lv.ERR_BLOCK_COPY_ACTIVE {
				return classify(err, what)
			}
		}
		select {
		case <-ctx.Done():
			_ = d.BlockJobAbort(target, 0)
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(commitPoll):
		}
	}
}

// belowTop finds the disk of dom whose active file is top: its target and
// the file right below top; "" when no disk is on top.
func belowTop(dom *libvirtxml.Domain, top string) (target, base string, err error) {
	if dom.Devices != nil {
		for _, dd := range dom.Devices.Disks {
			if dd.Target == nil || fileOf(dd.Source) != top {
				continue
			}
			if b := dd.BackingStore; b != nil && fileOf(b.Source) != "" {
				return dd.Target.Dev, fileOf(b.Source), nil
			}
			return "", "", fmt.Errorf("%w: the disk has no layer below %s", errdefs.ErrFailedPrecondition, top)
		}
	}
	return "", "", nil
}

// fileOf is the file a disk source names, "" for another kind of source.
func fileOf(s *libvirtxml.DomainDiskSource) string {
	if s == nil || s.File == nil {
		return ""
	}
	return s.File.File
}

// SavedDefinition implements virt.Hypervisor.
func (c *Conn) SavedDefinition(ctx context.Context, file string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if c.root == "" {
		return "", fmt.Errorf("definition saved in %s: %w: the test driver has its own state files", file, errdefs.ErrNotImplemented)
	}
	x, err := c.conn.DomainSaveImageGetXMLDesc(file, 0)
	if err != nil {
		return "", stateFileError(err, "definition saved in "+file)
	}
	return x, nil
}

// Restore implements virt.Hypervisor: libvirt starts QEMU with the domain's
// own definition and the state file on an inherited descriptor, after it
// checked that definition against the one saved in the file (the same
// guest-visible hardware; paths, emulator and taps may differ).
func (c *Conn) Restore(ctx context.Context, name, file string) error {
	what := fmt.Sprintf("restore %s from %s", subject(name), file)
	d, st, err := c.domainState(ctx, name)
	if err != nil {
		return err
	}
	defer d.Free()
	if st.Active() {
		return fmt.Errorf("%s: %w: already %s", what, errdefs.ErrFailedPrecondition, st)
	}
	if c.root == "" {
		return fmt.Errorf("%s: %w: the test driver has its own state files", what, errdefs.ErrNotImplemented)
	}
	x, err := d.GetXMLDesc(lv.DOMAIN_XML_SECURE)
	if err != nil {
		return classify(err, what)
	}
	return stateFileError(c.conn.DomainRestoreFlags(file, x, lv.DOMAIN_SAVE_PAUSED), what)
}

// stateFileError classifies a failure to read or load a state file: a
// file libvirt cannot parse, a definition its ABI check refuses and a
// stream QEMU cannot load are the input's fault.
func stateFileError(err error, what string) error {
	if err == nil {
		return nil
	}
	var le lv.Error
	if errors.As(err, &le) {
		switch {
		case le.Code == lv.ERR_OPERATION_FAILED, le.Code == lv.ERR_READ_FAILED, le.Code == lv.ERR_CONFIG_UNSUPPORTED,
			// QEMU started and could not load the stream: libvirt reports
			// only that QEMU went, with QEMU's last words.
			le.Code == lv.ERR_INTERNAL_ERROR && strings.Contains(le.Message, "load of migration failed"):
			return fmt.Errorf("%s: %w: %s (libvirt code %d)", what, errdefs.ErrInvalidArgument, le.Message, int(le.Code))
		}
	}
	return classify(err, what)
}
