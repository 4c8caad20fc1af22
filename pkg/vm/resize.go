package vm

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/vmpod/vmpod/pkg/vmspec"
)

// How long a live resize waits for the guest, polling every resizePoll:
// vCPUs appear in the guest a second or two after the plug under TCG,
// and the guest plugs virtio-mem blocks as fast as it can online them.
// A shrink waits less: memory the guest cannot free does not come free
// by waiting, and the kubelet retries.
const (
	resizePoll         = 250 * time.Millisecond
	vcpuOnlineTimeout  = 30 * time.Second
	memoryGrowTimeout  = 60 * time.Second
	memoryShrinkWindow = 20 * time.Second
	// dimmFreeTimeout bounds the wait for QEMU to free the memory of
	// DIMMs the guest gave back, before its limit falls.
	dimmFreeTimeout = 5 * time.Second
)

// Size is what a running VM has: the vCPUs online in the guest and its RAM.
type Size struct {
	VCPUs       int
	MemoryBytes uint64
}

// Update applies new container resources to the running VM, live, and
// returns only when the VM has them, or with an error that says what it
// has instead (the kubelet records a resize as done when this returns
// nil, and retries one that failed):
//
//   - CPU shares and quota change QEMU's cgroup.
//   - A CPU limit of another whole number of CPUs changes the vCPUs the
//     guest has online, within vmpod.io/max-vcpus (or the node's default
//     room, Request.DefaultMaxVCPUs): vCPUs beyond those
//     plugged are hot-plugged, and the guest agent onlines or offlines
//     them (the guest gives vCPUs back by offlining them; QEMU keeps
//     their halted threads for the next rise).
//   - A memory limit changes the guest's RAM within vmpod.io/max-memory,
//     through the VM's virtio-mem device, or in whole DIMMs for a VM made
//     with vmpod.io/memory-hotplug: dimm; QEMU's memory limit rises
//     before the guest grows and falls only as far as the guest shrank,
//     so QEMU is never limited below what the guest holds.
//
// A VM created without room (no maxima) keeps its vCPUs and RAM: asking
// for more is refused with what to do instead, as is a size the VM
// cannot reach. One resize runs at a time.
func (v *VM) Update(ctx context.Context, r *specs.LinuxResources) error {
	if r == nil {
		return nil
	}
	if v.cgroup == nil || v.machine == nil {
		return fmt.Errorf("update %s: the VM is not running in a cgroup of its own: %w", v.spec.Name, errdefs.ErrFailedPrecondition)
	}
	if !v.resizing.TryLock() {
		return fmt.Errorf("update %s: another resize of the VM is in progress: %w", v.spec.Name, errdefs.ErrFailedPrecondition)
	}
	defer v.resizing.Unlock()

	cur, noAgent, err := v.size(ctx)
	if err != nil {
		return err
	}
	want := cur
	if cpu := r.CPU; cpu != nil && cpu.Quota != nil && *cpu.Quota > 0 && cpu.Period != nil && *cpu.Period > 0 {
		want.VCPUs = int((uint64(*cpu.Quota) + *cpu.Period - 1) / *cpu.Period)
	}
	if m := r.Memory; m != nil && m.Limit != nil && *m.Limit > 0 {
		want.MemoryBytes = uint64(*m.Limit) &^ (1<<20 - 1)
	}
	if err := v.checkResize(cur, want); err != nil {
		return err
	}
	if noAgent != nil && want.VCPUs > cur.VCPUs {
		return noAgent
	}
	if v.spec.MaxVCPUs == 0 || noAgent != nil {
		want.VCPUs = cur.VCPUs // a lower limit changes the quota only
	}

	// Memory first, as the kubelet orders it. CPU quota rises before the
	// vCPUs that run in it and falls after the guest gave them back.
	if want.MemoryBytes != cur.MemoryBytes {
		if err := v.resizeMemory(ctx, cur.MemoryBytes, want.MemoryBytes); err != nil {
			return err
		}
	}
	quotaFirst := want.VCPUs > cur.VCPUs
	if quotaFirst && r.CPU != nil {
		if err := v.cgroup.UpdateCPU(r.CPU); err != nil {
			return err
		}
	}
	if want.VCPUs != cur.VCPUs {
		if err := v.resizeVCPUs(ctx, want.VCPUs); err != nil {
			return err
		}
	}
	if !quotaFirst && r.CPU != nil {
		if err := v.cgroup.UpdateCPU(r.CPU); err != nil {
			return err
		}
	}
	if r.CPU != nil {
		v.cpu = r.CPU
	}
	return nil
}

// checkResize refuses what the VM cannot become, before anything changes.
func (v *VM) checkResize(cur, want Size) error {
	s := v.spec
	var errs []error
	switch top := s.CeilingVCPUs(); {
	case want.VCPUs == cur.VCPUs:
	case s.MaxVCPUs == 0 && want.VCPUs > cur.VCPUs:
		errs = append(errs, fmt.Errorf("cpu limit of %d CPUs: the VM has %d vCPUs and was created without room for more (the node gives room by default up to its CPUs and --default-max-vcpus, and none to a VM that boots from its disk under TCG); set %s when the pod is created to add vCPUs live, or resize with resizePolicy RestartContainer",
			want.VCPUs, cur.VCPUs, vmspec.AnnotationMaxVCPUs))
	case s.MaxVCPUs == 0:
		// No room, no vCPU change: a lower limit changes the quota only,
		// as before vCPUs could change.
	case want.VCPUs > top && v.defaultRoom:
		errs = append(errs, fmt.Errorf("cpu limit of %d CPUs: above %d, the most vCPUs this VM can have (the node's default room, up to its CPUs and --default-max-vcpus, as the pod set no %s); recreate the pod with %s set higher",
			want.VCPUs, top, vmspec.AnnotationMaxVCPUs, vmspec.AnnotationMaxVCPUs))
	case want.VCPUs > top:
		errs = append(errs, fmt.Errorf("cpu limit of %d CPUs: above %s=%d, the most vCPUs this VM can have; recreate the pod with a larger maximum",
			want.VCPUs, vmspec.AnnotationMaxVCPUs, top))
	}
	switch {
	case want.MemoryBytes == cur.MemoryBytes:
	case s.HotplugMemoryBytes() == 0:
		errs = append(errs, fmt.Errorf("memory limit of %dMi: the VM has %dMi and was created without room to change it live; set %s when the pod is created, or resize with resizePolicy RestartContainer",
			want.MemoryBytes>>20, cur.MemoryBytes>>20, vmspec.AnnotationMaxMemory))
	case want.MemoryBytes > s.CeilingMemoryBytes():
		errs = append(errs, fmt.Errorf("memory limit of %dMi: above %s=%dMi, the most RAM this VM can have; recreate the pod with a larger maximum",
			want.MemoryBytes>>20, vmspec.AnnotationMaxMemory, s.CeilingMemoryBytes()>>20))
	case want.MemoryBytes < s.MemoryBytes:
		errs = append(errs, fmt.Errorf("memory limit of %dMi: below the %dMi the VM booted with; only memory added live can be taken away",
			want.MemoryBytes>>20, s.MemoryBytes>>20))
	case s.DIMMs() && (want.MemoryBytes-s.MemoryBytes)%s.DIMMBytes() != 0:
		errs = append(errs, fmt.Errorf("memory limit of %dMi: the VM's RAM changes in whole DIMMs of %dMi (%s: %s) from the %dMi it booted with; ask for %dMi plus a multiple of %dMi",
			want.MemoryBytes>>20, s.DIMMBytes()>>20, vmspec.AnnotationMemoryHotplug, vmspec.MemoryHotplugDIMM, s.MemoryBytes>>20, s.MemoryBytes>>20, s.DIMMBytes()>>20))
	case (want.MemoryBytes-s.MemoryBytes)%vmspec.MemoryBlockBytes != 0:
		errs = append(errs, fmt.Errorf("memory limit of %dMi: the VM's RAM changes in blocks of 2Mi from the %dMi it booted with; ask for an even number of Mi more",
			want.MemoryBytes>>20, s.MemoryBytes>>20))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("resize %s: %w: %v", v.spec.Name, errdefs.ErrFailedPrecondition, err)
	}
	return nil
}

// size is what the VM has now: the guest's RAM from the hypervisor, and
// its vCPUs: those plugged, or, for a VM with room for more
// (vmpod.io/max-vcpus), those its guest agent reports online, which
// needs the agent. Read each time rather than remembered, so that it
// holds after a daemon restart adopted the VM.
//
// A VM whose room the node gave by default (defaultRoom) did not ask for
// vCPU changes, so its guest may have no agent. Without an answer its
// vCPUs are those vmpod could have brought online without one: those
// plugged under KVM (where only a resize plugs), the pod's own under TCG
// (where the command line kept the rest offline); noAgent then says why
// they cannot change.
func (v *VM) size(ctx context.Context) (s Size, noAgent, err error) {
	hs, err := v.hv.Size(ctx, v.spec.Name)
	if err != nil {
		return Size{}, nil, err
	}
	s = Size{VCPUs: hs.VCPUs, MemoryBytes: v.spec.MemoryBytes + hs.HotplugPluggedBytes}
	if v.spec.MaxVCPUs == 0 {
		return s, nil, nil
	}
	online, _, err := v.guestVCPUs(ctx)
	switch {
	case err == nil:
		s.VCPUs = len(online)
	case v.defaultRoom && errdefs.IsFailedPrecondition(err):
		if hs.VCPUs == hs.MaxVCPUs { // all plugged at boot: TCG
			s.VCPUs = v.spec.VCPUs
		}
		return s, err, nil
	default:
		return Size{}, nil, err
	}
	return s, nil, nil
}

// Size is what the running VM has now: vCPUs online in the guest and RAM.
func (v *VM) Size(ctx context.Context) (Size, error) {
	if v.machine == nil {
		return Size{}, fmt.Errorf("size of %s: not running: %w", v.spec.Name, errdefs.ErrFailedPrecondition)
	}
	s, _, err := v.size(ctx)
	return s, err
}

// resizeMemory moves the guest's RAM from cur to want bytes.
func (v *VM) resizeMemory(ctx context.Context, cur, want uint64) error {
	limit := func(guest uint64) uint64 {
		s := v.spec
		s.MemoryBytes = guest
		return MemoryLimit(s, v.host)
	}
	if want > cur {
		if err := v.cgroup.UpdateMemory(limit(want)); err != nil {
			return err
		}
	}
	if v.spec.DIMMs() {
		has, err := v.resizeDIMMs(ctx, cur, want)
		// QEMU's limit follows what the guest holds, never below it, and
		// not below what QEMU holds: it frees an unplugged DIMM's memory
		// a moment after libvirt reports the DIMM gone (through its RCU;
		// seen: up to 500 ms under TCG), and until then a lower limit is
		// refused (cgroup v1: EBUSY) or reclaimed for, then enforced by
		// killing QEMU (v2).
		l := limit(max(has, want))
		if has < cur {
			_ = poll(ctx, dimmFreeTimeout, func() (bool, error) { return v.cgroup.MemoryUsage() <= l, nil })
			if u := v.cgroup.MemoryUsage(); u > l {
				return errors.Join(err, fmt.Errorf("resize %s to %dMi of RAM: the guest has %dMi, but QEMU still holds %dMi of memory after %v, above the %dMi limit of that size; its limit stays at %dMi: %w",
					v.spec.Name, want>>20, has>>20, u>>20, dimmFreeTimeout, l>>20, limit(cur)>>20, errdefs.ErrUnavailable))
			}
		}
		if lerr := v.cgroup.UpdateMemory(l); lerr != nil {
			return errors.Join(err, lerr)
		}
		return err
	}
	ask, spareErr := want, error(nil)
	if want < cur {
		var err error
		if ask, spareErr, err = v.virtioMemShrink(ctx, cur, want); err != nil {
			return err
		}
		if ask == cur {
			return spareErr
		}
	}
	if err := v.hv.RequestHotplugMemory(ctx, v.spec.Name, ask-v.spec.MemoryBytes); err != nil {
		return err
	}
	wait := memoryGrowTimeout
	if want < cur {
		wait = memoryShrinkWindow
	}
	has, waitErr := v.waitMemory(ctx, ask, wait)
	if waitErr == nil {
		waitErr = spareErr
	}
	// QEMU's limit follows what the guest holds, never below it.
	if err := v.cgroup.UpdateMemory(limit(max(has, ask))); err != nil {
		return errors.Join(waitErr, err)
	}
	return waitErr
}

// virtioMemShrink is how far a VM with a virtio-mem device asks its
// guest to shrink from cur towards want bytes of RAM: only as far as
// the guest keeps unplugHeadroom available. Its kernel gives back blocks
// by moving what is in them elsewhere, and moving more than it has
// spare leaves its own allocations none: it kills its processes and
// panics (seen: Linux 6.1, a tmpfs filling the added memory, under
// load). When it asks less than want, spareErr says why (Unavailable:
// the kubelet retries). A guest without an agent, or whose agent
// refuses to read files, is asked for want: its kernel decides alone.
func (v *VM) virtioMemShrink(ctx context.Context, cur, want uint64) (ask uint64, spareErr, err error) {
	avail, err := v.guestMemAvailable(ctx)
	if err != nil {
		if noAgentAnswer(err) {
			return want, nil, nil
		}
		return 0, nil, err
	}
	spare := avail - min(avail, unplugHeadroom)
	if cur-want <= spare {
		return want, nil, nil
	}
	// Down by whole blocks of what the guest can spare.
	ask = cur - spare/vmspec.MemoryBlockBytes*vmspec.MemoryBlockBytes
	return ask, fmt.Errorf("resize %s to %dMi of RAM: the guest gave back only part of it and has %dMi: it has %dMi available, and gives memory back only while it keeps %dMi to spare; the kubelet retries: %w",
		v.spec.Name, want>>20, ask>>20, avail>>20, unplugHeadroom>>20, errdefs.ErrUnavailable), nil
}

// resizeDIMMs moves a VM that grows in DIMMs (vmpod.io/memory-hotplug:
// dimm) from cur to want bytes of RAM, which differ by whole DIMMs, and
// returns what the guest holds at the end. QEMU's limit already covers
// want when it grows; the caller sets it to what is held after.
//
// Growing plugs DIMMs, which libvirt counts as soon as QEMU has them,
// and then waits (bounded) until the guest has their memory online, as
// its guest agent reports it: the ACPI notice reaches the guest and its
// kernel onlines the memory a moment later (a few hundred ms under
// TCG), and a pod that uses the new memory at once must find it there.
// A guest without an agent, or whose agent refuses, is not asked. Shrinking unplugs the newest DIMMs
// one at a time, each going only when the guest has offlined and
// ejected all of its memory; it stops at the first the guest keeps
// through memoryShrinkWindow, as memory it cannot move now does not come
// free by waiting, and the kubelet retries.
func (v *VM) resizeDIMMs(ctx context.Context, cur, want uint64) (uint64, error) {
	step := v.spec.DIMMBytes()
	if want > cur {
		online, err := v.guestOnlineMemory(ctx)
		ask := err == nil
		if err != nil && !noAgentAnswer(err) {
			return cur, err
		}
		for has := cur; has < want; has += step {
			if err := v.hv.PlugDIMM(ctx, v.spec.Name, step); err != nil {
				return has, err
			}
		}
		if !ask {
			return want, nil
		}
		var now uint64
		err = poll(ctx, memoryGrowTimeout, func() (bool, error) {
			var err error
			now, err = v.guestOnlineMemory(ctx)
			return now >= online+want-cur, err
		})
		if errors.Is(err, errWaitedOut) {
			return want, fmt.Errorf("resize %s to %dMi of RAM: its DIMMs are plugged, but the guest brought only %dMi of their %dMi online in %v; its kernel must online hot-added memory (memhp_default_state=online_movable on its command line, or a udev rule): %w",
				v.spec.Name, want>>20, (now-min(now, online))>>20, (want-cur)>>20, memoryGrowTimeout, errdefs.ErrFailedPrecondition)
		}
		return want, err
	}
	deadline := time.Now().Add(memoryShrinkWindow)
	has := cur
	for has > want {
		// The guest's kernel offlines a DIMM by moving everything in it
		// elsewhere first, and when elsewhere is too small it kills its
		// own processes and panics rather than give up (seen: Linux 6.1,
		// a tmpfs filling the DIMMs). So a DIMM goes only while the guest
		// has room for all of it. A guest without an agent, or whose agent
		// refuses to read files, is not asked: its kernel decides alone.
		avail, err := v.guestMemAvailable(ctx)
		switch {
		case err == nil && avail < step+unplugHeadroom:
			return has, fmt.Errorf("resize %s to %dMi of RAM: the guest gave back only part of it and has %dMi: it has %dMi available, and a %dMi DIMM goes only when the guest can move all of it elsewhere with %dMi to spare; the kubelet retries: %w",
				v.spec.Name, want>>20, has>>20, avail>>20, step>>20, unplugHeadroom>>20, errdefs.ErrUnavailable)
		case err != nil && !noAgentAnswer(err):
			return has, err
		}
		if err := v.hv.UnplugDIMM(ctx, v.spec.Name); err != nil {
			return has, err
		}
		has, err = v.waitHeld(ctx, has-step, max(time.Until(deadline), resizePoll))
		if errors.Is(err, errWaitedOut) {
			return has, v.heldErr(want, has, memoryShrinkWindow)
		}
		if err != nil {
			return has, err
		}
	}
	return has, nil
}

// noAgentAnswer reports whether err says that the guest has no agent
// to ask (Unavailable, FailedPrecondition) or that its agent refuses
// the command (InvalidArgument: qemu-ga can block commands), so that a
// DIMM resize goes on without the agent's help.
func noAgentAnswer(err error) bool {
	return errdefs.IsUnavailable(err) || errdefs.IsFailedPrecondition(err) || errdefs.IsInvalidArgument(err)
}

// unplugHeadroom is what the guest must keep available for vmpod to
// ask it for memory back (a DIMM, or virtio-mem blocks): its kernel's
// own allocations go on while the pages move.
const unplugHeadroom = 64 << 20

// guestMemAvailable is the guest's MemAvailable (its kernel's estimate
// of what it can allocate without swapping), read from /proc/meminfo
// through its agent's file commands, which need no shell in the guest.
// An agent that does not answer is Unavailable or FailedPrecondition.
func (v *VM) guestMemAvailable(ctx context.Context) (uint64, error) {
	var h int
	if err := v.machine.agent(ctx, "guest-file-open", map[string]string{"path": "/proc/meminfo", "mode": "r"}, &h); err != nil {
		return 0, err
	}
	var r struct {
		Buf string `json:"buf-b64"`
	}
	err := v.machine.agent(ctx, "guest-file-read", map[string]int{"handle": h, "count": 16 << 10}, &r)
	var closed struct{}
	if cerr := v.machine.agent(ctx, "guest-file-close", map[string]int{"handle": h}, &closed); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	b, err := base64.StdEncoding.DecodeString(r.Buf)
	if err != nil {
		return 0, fmt.Errorf("%w: the guest agent sent bad base64: %v", errdefs.ErrUnknown, err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			kib, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				break
			}
			return kib << 10, nil
		}
	}
	return 0, fmt.Errorf("%w: the guest's /proc/meminfo has no MemAvailable", errdefs.ErrUnknown)
}

// guestOnlineMemory is the RAM the guest has online, as its agent
// reports it: its online memory blocks (guest-get-memory-blocks, from
// the guest's /sys/devices/system/memory) times their size. An agent
// that does not answer is Unavailable or FailedPrecondition.
func (v *VM) guestOnlineMemory(ctx context.Context) (uint64, error) {
	var info struct {
		Size uint64 `json:"size"`
	}
	if err := v.machine.agent(ctx, "guest-get-memory-block-info", nil, &info); err != nil {
		return 0, err
	}
	var blocks []struct {
		Online bool `json:"online"`
	}
	if err := v.machine.agent(ctx, "guest-get-memory-blocks", nil, &blocks); err != nil {
		return 0, err
	}
	var n uint64
	for _, b := range blocks {
		if b.Online {
			n++
		}
	}
	return n * info.Size, nil
}

// waitMemory waits until the guest holds want bytes of RAM, and returns
// what it holds when it does or when wait ran out (an error then says
// what it holds).
func (v *VM) waitMemory(ctx context.Context, want uint64, wait time.Duration) (uint64, error) {
	has, err := v.waitHeld(ctx, want, wait)
	if errors.Is(err, errWaitedOut) {
		return has, v.heldErr(want, has, wait)
	}
	return has, err
}

// waitHeld polls what the guest holds until it is want bytes of RAM, or
// wait passes (errWaitedOut), and returns what it holds.
func (v *VM) waitHeld(ctx context.Context, want uint64, wait time.Duration) (uint64, error) {
	var has uint64
	err := poll(ctx, wait, func() (bool, error) {
		hs, err := v.hv.Size(ctx, v.spec.Name)
		if err != nil {
			return false, err
		}
		has = v.spec.MemoryBytes + hs.HotplugPluggedBytes
		return has == want, nil
	})
	return has, err
}

// heldErr says that a resize to want bytes of RAM waited wait and the
// guest holds has instead: Unavailable, as the kubelet retries a resize
// that failed and the guest may manage then.
func (v *VM) heldErr(want, has uint64, wait time.Duration) error {
	verb := "plugged"
	if want < has {
		verb = "gave back"
	}
	return fmt.Errorf("resize %s to %dMi of RAM: the guest %s only part of it in %v and has %dMi; the kubelet retries: %w",
		v.spec.Name, want>>20, verb, wait, has>>20, errdefs.ErrUnavailable)
}

// resizeVCPUs plugs vCPUs up to n if fewer are plugged, then has the
// guest agent bring exactly n online.
func (v *VM) resizeVCPUs(ctx context.Context, n int) error {
	if err := v.hv.PlugVCPUs(ctx, v.spec.Name, n); err != nil {
		return err
	}
	err := poll(ctx, vcpuOnlineTimeout, func() (bool, error) {
		online, offline, err := v.guestVCPUs(ctx)
		if err != nil {
			return false, err
		}
		if len(online) == n {
			return true, nil
		}
		var set []guestVCPU
		for _, id := range offline {
			if len(online)+len(set) < n {
				set = append(set, guestVCPU{ID: id, Online: true})
			}
		}
		for i := len(online) - 1; i >= 0 && len(online)-len(set) > n; i-- {
			if online[i] != 0 { // the boot CPU cannot go
				set = append(set, guestVCPU{ID: online[i], Online: false})
			}
		}
		if len(set) > 0 {
			var changed int
			// A vCPU just plugged may not be in the guest yet: the agent
			// then fails, and the next round tries again.
			_ = v.machine.agent(ctx, "guest-set-vcpus", map[string]any{"vcpus": set}, &changed)
		}
		return false, nil
	})
	if errors.Is(err, errWaitedOut) {
		online, _, _ := v.guestVCPUs(ctx)
		return fmt.Errorf("resize %s to %d vCPUs: the guest has %d online after %v; the kubelet retries: %w",
			v.spec.Name, n, len(online), vcpuOnlineTimeout, errdefs.ErrUnavailable)
	}
	return err
}

type guestVCPU struct {
	ID     int  `json:"logical-id"`
	Online bool `json:"online"`
}

// guestVCPUs asks the guest agent which vCPUs are online and which are
// offline (and may come online), each sorted. An agent that does not
// answer is FailedPrecondition: vCPUs change only with its help.
func (v *VM) guestVCPUs(ctx context.Context) (online, offline []int, err error) {
	var cpus []struct {
		guestVCPU
		CanOffline bool `json:"can-offline"`
	}
	if err := v.machine.agent(ctx, "guest-get-vcpus", nil, &cpus); err != nil {
		if errdefs.IsUnavailable(err) || errdefs.IsFailedPrecondition(err) {
			return nil, nil, fmt.Errorf("vCPUs of %s: the guest agent (qemu-ga) must bring vCPUs online or take them offline, and it does not answer: %w: %v",
				v.spec.Name, errdefs.ErrFailedPrecondition, err)
		}
		return nil, nil, err
	}
	for _, c := range cpus {
		if c.Online {
			online = append(online, c.ID)
		} else {
			offline = append(offline, c.ID)
		}
	}
	slices.Sort(online)
	slices.Sort(offline)
	return online, offline, nil
}

// errWaitedOut is poll's: its wait passed.
var errWaitedOut = errors.New("waited out")

// poll calls done every resizePoll until it reports true or an error, or
// wait passes (errWaitedOut) or ctx ends.
func poll(ctx context.Context, wait time.Duration, done func() (bool, error)) error {
	deadline := time.Now().Add(wait)
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return errWaitedOut
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(resizePoll):
		}
	}
}
