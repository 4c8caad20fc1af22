package jail

import (
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"

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
// The search starts at a hash of owner, so a pod's uid is usually stable.
// Leases are taken under a lock on dir, so two shims never share a uid.
func Allocate(dir string, r Range, owner string) (uint32, error) {
	if r.Count == 0 {
		return 0, fmt.Errorf("uid range is empty")
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return 0, err
	}
	defer unlock()
	h := fnv.New32a()
	h.Write([]byte(owner))
	start := h.Sum32() % r.Count
	for i := uint32(0); i < r.Count; i++ {
		uid := r.First + (start+i)%r.Count
		lease := filepath.Join(dir, strconv.FormatUint(uint64(uid), 10))
		switch held, err := os.ReadFile(lease); {
		case err == nil && string(held) == owner:
			return uid, nil // this owner's lease already
		case err == nil && ownerGone(string(held)):
			if err := replaceFile(lease, owner); err != nil {
				return 0, err
			}
			return uid, nil
		case err == nil:
			continue
		case !errors.Is(err, os.ErrNotExist):
			return 0, err
		}
		if err := replaceFile(lease, owner); err != nil {
			return 0, err
		}
		return uid, nil
	}
	return 0, fmt.Errorf("all %d uids from %d are leased (in %s)", r.Count, r.First, dir)
}

// Release ends owner's lease, if it has one.
func Release(dir, owner string) error {
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
		if _, err := strconv.ParseUint(e.Name(), 10, 32); err != nil {
			continue
		}
		lease := filepath.Join(dir, e.Name())
		if held, err := os.ReadFile(lease); err == nil && string(held) == owner {
			if err := os.Remove(lease); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return nil
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
