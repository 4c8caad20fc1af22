package jail_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/vmpod/vmpod/pkg/jail"
)

func TestAllocate(t *testing.T) {
	dir := t.TempDir()
	leases := filepath.Join(dir, "uids")
	r := jail.Range{First: 0x70000000, Count: 3}
	pod := func(name string) string {
		p := filepath.Join(dir, "pods", name)
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b, c := pod("a"), pod("b"), pod("c")
	seen := map[uint32]string{}
	for _, owner := range []string{a, b, c} {
		uid, err := jail.Allocate(leases, r, owner)
		if err != nil {
			t.Fatal(err)
		}
		if uid < r.First || uid >= r.First+r.Count {
			t.Fatalf("uid %d outside %v", uid, r)
		}
		if other, ok := seen[uid]; ok {
			t.Fatalf("uid %d leased to %s and %s", uid, other, owner)
		}
		seen[uid] = owner
		if again, err := jail.Allocate(leases, r, owner); err != nil || again != uid {
			t.Fatalf("%s asked again: %d, %v; want its lease %d", owner, again, err, uid)
		}
	}
	if _, err := jail.Allocate(leases, r, pod("d")); err == nil {
		t.Fatal("a fourth pod got a uid from a range of 3")
	}
	// A released uid, and a lease whose pod dir is gone, go to new pods.
	var uidA, uidB uint32
	for uid, owner := range seen {
		switch owner {
		case a:
			uidA = uid
		case b:
			uidB = uid
		}
	}
	if err := jail.Release(leases, pod("e")); err != nil { // holds none: nothing freed
		t.Fatal(err)
	}
	if _, err := jail.Allocate(leases, r, pod("e")); err == nil {
		t.Fatal("another owner's release freed a uid")
	}
	if err := jail.Release(leases, a); err != nil {
		t.Fatal(err)
	}
	if uid, err := jail.Allocate(leases, r, pod("f")); err != nil || uid != uidA {
		t.Fatalf("after a's release: %d, %v; want %d", uid, err, uidA)
	}
	if err := os.RemoveAll(b); err != nil {
		t.Fatal(err)
	}
	if uid, err := jail.Allocate(leases, r, pod("g")); err != nil || uid != uidB {
		t.Fatalf("after b's dir went: %d, %v; want %d", uid, err, uidB)
	}
}

func TestParseRange(t *testing.T) {
	if r, err := jail.ParseRange("1879048192:65536"); err != nil || r != jail.DefaultRange {
		t.Fatalf("%v, %v", r, err)
	}
	for _, bad := range []string{"", "1879048192", "0:10", "10:0", "4294967290:10", "a:b", "-1:5"} {
		if _, err := jail.ParseRange(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
