package jail

import (
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Range is a block of uids (and the same gids) for QEMU processes, one per
// pod. The node admin keeps it free of other users: no /etc/passwd entry,
// no /etc/subuid range, no user-namespaced pod mapped onto it.
type Range struct {
	First uint32
	Count uint32
}

// DefaultRange is 65536 ids from 1879048192 (0x70000000), in the block
// 1879048192-2147483647 that systemd's uid allocation leaves unused, below
// the ids above 2^31 that some tools mishandle.
var DefaultRange = Range{First: 0x70000000, Count: 65536}

// ParseRange reads "FIRST:COUNT" (e.g. "1879048192:65536").
func ParseRange(s string) (Range, error) {
	first, count, ok := strings.Cut(s, ":")
	f, err1 := strconv.ParseUint(first, 10, 32)
	c, err2 := strconv.ParseUint(count, 10, 32)
	if !ok || err1 != nil || err2 != nil || f == 0 || c == 0 || f+c-1 > 0xfffffffe {
		return Range{}, fmt.Errorf("uid range %q: want FIRST:COUNT with 0 < FIRST and FIRST+COUNT-1 <= 4294967294", s)
	}
	return Range{First: uint32(f), Count: uint32(c)}, nil
}

// Allocate leases a uid of r to owner (a pod's state dir) through a file
// per uid in dir, created exclusively. A lease whose owner dir no longer
// exists is stale (its pod is gone without a Release) and is taken over.
// A uid that any process still runs as is never handed to a new owner,
// leased or not: a QEMU that outlived its pod's state (an orphan) would
// otherwise share a uid, and so its files and its signals, with the next
// pod's QEMU. The search starts at a hash of owner, so a pod's uid is
// usually stable. Leases are taken under a lock on dir, so two runtimes
// never share a uid.
func Allocate(dir string, r Range, owner string) (uint32, error) {
	if r.Count == 0 {
		return 0, fmt.Errorf("uid range is empty")
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return 0, err
	}
	defer unlock()
	running, err := processesByUID(r)
	if err != nil {
		return 0, err
	}
	h := fnv.New32a()
	h.Write([]byte(owner))
	start := h.Sum32() % r.Count
	busy := 0
	for i := uint32(0); i < r.Count; i++ {
		uid := r.First + (start+i)%r.Count
		lease := filepath.Join(dir, strconv.FormatUint(uint64(uid), 10))
		held, err := os.ReadFile(lease)
		switch {
		case err == nil && string(held) == owner:
			return uid, nil // this owner's lease already
		case err != nil && !errors.Is(err, os.ErrNotExist):
			return 0, err
		case err == nil && !ownerGone(string(held)):
			continue
		case len(running[uid]) > 0:
			busy++ // free or stale, but an orphan still runs as it
			continue
		}
		if err := replaceFile(lease, owner); err != nil {
			return 0, err
		}
		return uid, nil
	}
	return 0, fmt.Errorf("all %d uids from %d are leased (in %s) or still run a process (%d)", r.Count, r.First, dir, busy)
}

// Release ends owner's lease, if it has one, once no process runs as its
// uid: each one left (a QEMU the hypervisor lost track of) is killed
// first, and the lease is kept, with an error, if one outlives
// KillWait.
func Release(dir, owner string) error {
	return withLease(dir, owner, func(lease string, uid uint32) error {
		if err := killUID(uid); err != nil {
			return err
		}
		if err := os.Remove(lease); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	})
}

// KillOrphans kills every process that runs as owner's uid, if it has a
// lease, and waits for them to go (at most KillWait). The runtime calls
// it when it recovers a VM it could not take over, before the pod's next
// QEMU runs as the same uid.
func KillOrphans(dir, owner string) error {
	return withLease(dir, owner, func(_ string, uid uint32) error { return killUID(uid) })
}

// withLease runs fn on owner's lease file and uid, if it has one, under
// the lock on dir.
func withLease(dir, owner string, fn func(lease string, uid uint32) error) error {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer unlock()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		uid, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil {
			continue
		}
		lease := filepath.Join(dir, e.Name())
		if held, err := os.ReadFile(lease); err == nil && string(held) == owner {
			if err := fn(lease, uint32(uid)); err != nil {
				return err
			}
		}
	}
	return nil
}

// KillWait bounds the wait for a uid's processes to go after SIGKILL.
var KillWait = 10 * time.Second

// KillUID sends SIGKILL to every process that runs as uid (real,
// effective, saved or filesystem) and waits until none is left (at most
// KillWait). A process of a jail's uid is a QEMU (or a tool or file
// server) of that jail, or what one of them started: nothing else runs
// as it (Range). The caller holds uid's lease, so no other pod's
// processes run as it.
func KillUID(uid uint32) error { return killUID(uid) }

func killUID(uid uint32) error {
	r := Range{First: uid, Count: 1}
	deadline := time.Now().Add(KillWait)
	for {
		running, err := processesByUID(r)
		if err != nil {
			return err
		}
		pids := running[uid]
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("uid %d: processes %v still run %v after SIGKILL", uid, pids, KillWait)
		}
		for _, pid := range pids {
			// ESRCH: gone since the scan. Zombies stay until reaped
			// and are not counted (processesByUID).
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processesByUID lists the live processes (not zombies) that run as a
// uid of r, by any of their uids, from /proc.
func processesByUID(r Range) (map[uint32][]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := map[uint32][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue // gone meanwhile
		}
		uids, state := statusUIDs(string(b))
		if state == "Z" || state == "X" {
			continue
		}
		seen := map[uint32]bool{}
		for _, u := range uids {
			if u >= r.First && u-r.First < r.Count && !seen[u] {
				seen[u] = true
				out[u] = append(out[u], pid)
			}
		}
	}
	return out, nil
}

// statusUIDs reads the Uid line (real, effective, saved, filesystem) and
// the state letter of a /proc/PID/status.
func statusUIDs(status string) (uids []uint32, state string) {
	for _, line := range strings.Split(status, "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch key {
		case "State":
			state, _, _ = strings.Cut(strings.TrimSpace(val), " ")
		case "Uid":
			for _, f := range strings.Fields(val) {
				if u, err := strconv.ParseUint(f, 10, 32); err == nil {
					uids = append(uids, uint32(u))
				}
			}
		}
	}
	return uids, state
}

func ownerGone(owner string) bool {
	_, err := os.Lstat(owner)
	return errors.Is(err, os.ErrNotExist)
}

// lockDir creates dir and holds its lock file until unlock: leases are
// read and written by one shim at a time.
func lockDir(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// replaceFile writes content to path atomically.
func replaceFile(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
