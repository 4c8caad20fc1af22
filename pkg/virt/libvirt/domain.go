package libvirt

import (
	"context"
	"encoding/xml"
	"fmt"

	"github.com/containerd/errdefs"
	lv "libvirt.org/go/libvirt"

	"github.com/vmpod/vmpod/pkg/virt"
)

// Define implements virt.Hypervisor.
func (c *Conn) Define(ctx context.Context, domainXML string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// Only the name is needed here; libvirt parses the rest and, with
	// VALIDATE, checks it against its schema, so a typo in an element name
	// fails instead of being ignored.
	var head struct {
		Name string `xml:"name"`
	}
	if err := xml.Unmarshal([]byte(domainXML), &head); err != nil {
		return fmt.Errorf("domain XML: %w: %v", errdefs.ErrInvalidArgument, err)
	}
	name := head.Name

	c.defineMu.Lock()
	defer c.defineMu.Unlock()
	if d, err := c.conn.LookupDomainByName(name); err == nil {
		_ = d.Free()
		return fmt.Errorf("%s: %w", subject(name), errdefs.ErrAlreadyExists)
	} else if code(err) != lv.ERR_NO_DOMAIN {
		return classify(err, subject(name))
	}
	d, err := c.conn.DomainDefineXMLFlags(domainXML, lv.DOMAIN_DEFINE_VALIDATE)
	if err != nil {
		return classify(err, "define "+subject(name))
	}
	return classify(d.Free(), subject(name))
}

// Start implements virt.Hypervisor.
func (c *Conn) Start(ctx context.Context, name string, opts virt.StartOptions) error {
	d, st, err := c.domainState(ctx, name)
	if err != nil {
		return err
	}
	defer d.Free()
	if st.Active() {
		return fmt.Errorf("start %s: %w: already %s", subject(name), errdefs.ErrFailedPrecondition, st)
	}
	// No AUTODESTROY: QEMU must outlive this connection and this process,
	// so that a restarted shim can re-attach.
	flags := lv.DOMAIN_NONE
	if opts.Paused && !c.pauseAfterStart {
		flags |= lv.DOMAIN_START_PAUSED
	}
	if err := d.CreateWithFlags(flags); err != nil {
		return classify(err, "start "+subject(name))
	}
	if opts.Paused && c.pauseAfterStart {
		return classify(d.Suspend(), "start paused "+subject(name))
	}
	return nil
}

// Resume implements virt.Hypervisor.
func (c *Conn) Resume(ctx context.Context, name string) error {
	d, st, err := c.domainState(ctx, name)
	if err != nil {
		return err
	}
	defer d.Free()
	switch st {
	case virt.StateRunning:
		return nil
	case virt.StatePaused:
		return classify(d.Resume(), "resume "+subject(name))
	default:
		return fmt.Errorf("resume %s: %w: %s, not paused", subject(name), errdefs.ErrFailedPrecondition, st)
	}
}

// Suspend implements virt.Hypervisor.
func (c *Conn) Suspend(ctx context.Context, name string) error {
	d, st, err := c.domainState(ctx, name)
	if err != nil {
		return err
	}
	defer d.Free()
	switch st {
	case virt.StatePaused:
		return nil
	case virt.StateRunning:
		return classify(d.Suspend(), "suspend "+subject(name))
	default:
		return fmt.Errorf("suspend %s: %w: %s, not running", subject(name), errdefs.ErrFailedPrecondition, st)
	}
}

// SetMemoryHardLimit implements virt.Hypervisor.
func (c *Conn) SetMemoryHardLimit(ctx context.Context, name string, bytes uint64) error {
	if bytes == 0 {
		return fmt.Errorf("memory hard limit of %s: %w: must be > 0", subject(name), errdefs.ErrInvalidArgument)
	}
	d, st, err := c.domainState(ctx, name)
	if err != nil {
		return err
	}
	defer d.Free()
	if !st.Active() {
		return fmt.Errorf("memory hard limit of %s: %w: %s, the limit is set live only", subject(name), errdefs.ErrFailedPrecondition, st)
	}
	params := &lv.DomainMemoryParameters{HardLimitSet: true, HardLimit: (bytes + 1023) / 1024}
	return classify(d.SetMemoryParameters(params, lv.DOMAIN_AFFECT_LIVE), "set memory hard limit of "+subject(name))
}

// Shutdown implements virt.Hypervisor.
func (c *Conn) Shutdown(ctx context.Context, name string) error {
	d, st, err := c.domainState(ctx, name)
	if err != nil {
		return err
	}
	defer d.Free()
	if !st.Active() {
		return fmt.Errorf("shut down %s: %w: %s", subject(name), errdefs.ErrFailedPrecondition, st)
	}
	return classify(d.ShutdownFlags(c.shutdownFlags), "shut down "+subject(name))
}

// domainState looks a domain up and reads its state. Operations check the
// state themselves because drivers disagree on the error for a wrong one
// (QEMU: OPERATION_INVALID; the test driver: INTERNAL_ERROR) and on whether
// pausing a paused domain is an error (QEMU: no). Checking here gives every
// driver QEMU's answers with one error class. The caller must Free d.
func (c *Conn) domainState(ctx context.Context, name string) (*lv.Domain, virt.State, error) {
	d, err := c.domain(ctx, name)
	if err != nil {
		return nil, 0, err
	}
	st, _, err := d.GetState()
	if err != nil {
		_ = d.Free()
		return nil, 0, classify(err, subject(name))
	}
	return d, mapState(st), nil
}

// Destroy implements virt.Hypervisor.
func (c *Conn) Destroy(ctx context.Context, name string) error {
	d, err := c.domain(ctx, name)
	if err != nil {
		return err
	}
	defer d.Free()
	if err := d.Destroy(); err != nil && !c.stoppedAnyway(d, err) {
		return classify(err, "destroy "+subject(name))
	}
	if c.root != "" {
		c.sweepCgroups()
	}
	return nil
}

// stoppedAnyway reports whether a failed destroy still left the domain
// stopped. Already stopped is "not running" (OPERATION_INVALID). After a
// re-attach, libvirt 9 kills QEMU, then notices the monitor EOF first and
// reports NO_DOMAIN (transient) or OPERATION_INVALID (persistent) although
// the kill did what was asked.
func (c *Conn) stoppedAnyway(d *lv.Domain, err error) bool {
	switch code(err) {
	case lv.ERR_NO_DOMAIN:
		return true
	case lv.ERR_OPERATION_INVALID:
		active, aerr := d.IsActive()
		return aerr == nil && !active || code(aerr) == lv.ERR_NO_DOMAIN
	default:
		return false
	}
}

// Undefine implements virt.Hypervisor.
func (c *Conn) Undefine(ctx context.Context, name string) error {
	d, err := c.domain(ctx, name)
	if err != nil {
		return err
	}
	defer d.Free()
	if err := d.UndefineFlags(c.undefineFlags); err != nil {
		return classify(err, "undefine "+subject(name))
	}
	if c.root != "" {
		c.sweepCgroups()
	}
	return nil
}

// List implements virt.Hypervisor.
func (c *Conn) List(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	doms, err := c.conn.ListAllDomains(0)
	if err != nil {
		return nil, classify(err, "list domains")
	}
	names := make([]string, 0, len(doms))
	var nameErr error
	for i := range doms {
		n, err := doms[i].GetName()
		if err != nil && nameErr == nil {
			nameErr = classify(err, "list domains")
		}
		names = append(names, n)
		_ = doms[i].Free()
	}
	if nameErr != nil {
		return nil, nameErr
	}
	return names, nil
}
