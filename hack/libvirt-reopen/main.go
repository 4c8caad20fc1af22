// Command libvirt-reopen measures what it costs a shim to close libvirt's
// embedded QEMU driver while its VM runs and open it again when needed
// (stop, exec, stats): it opens a fresh root with the node's warm
// capabilities cache (as a pod's first open), defines and starts a small
// TCG domain, then closes and reopens the root in-process -n times,
// printing each open's duration and the median.
//
//	go run ./hack/libvirt-reopen -cache _output/cache/qemu-capabilities
//
// Needs root and QEMU; the domain (no disk, 64 MiB) is destroyed and the
// scratch root removed at the end.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/vmpod/vmpod/pkg/node"
	"github.com/vmpod/vmpod/pkg/node/embedded"
	"github.com/vmpod/vmpod/pkg/virt"
)

func main() {
	cache := flag.String("cache", "", "warm capabilities cache (VMPOD_CAPS_CACHE); empty: a cold probe")
	n := flag.Int("n", 5, "reopens")
	flag.Parse()
	if err := run(*cache, *n); err != nil {
		fmt.Fprintln(os.Stderr, "libvirt-reopen:", err)
		os.Exit(1)
	}
}

func run(cache string, n int) error {
	ctx := context.Background()
	root, err := os.MkdirTemp("/tmp", "vmpod-reopen-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	o := node.Options{CapsCache: cache, Pod: true}
	start := time.Now()
	conn, err := embedded.Open(ctx, filepath.Join(root, "libvirt"), o)
	if err != nil {
		return err
	}
	fmt.Printf("first open (new root, cache %q): %v\n", cache, time.Since(start).Round(time.Millisecond))
	xml, err := (&libvirtxml.Domain{
		Type: "qemu", Name: "reopen",
		Memory: &libvirtxml.DomainMemory{Value: 64, Unit: "MiB"},
		VCPU:   &libvirtxml.DomainVCPU{Value: 1},
		OS:     &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Type: "hvm", Arch: "x86_64"}},
	}).Marshal()
	if err != nil {
		return err
	}
	if err := conn.Define(ctx, xml); err != nil {
		return err
	}
	if err := conn.Start(ctx, "reopen", virt.StartOptions{}); err != nil {
		return err
	}
	defer func() {
		_ = conn.Destroy(ctx, "reopen")
		_ = conn.Undefine(ctx, "reopen")
		_ = conn.Close()
	}()
	var opens []time.Duration
	for i := 0; i < n; i++ {
		if err := conn.Close(); err != nil {
			return err
		}
		start := time.Now()
		if conn, err = embedded.Open(ctx, filepath.Join(root, "libvirt"), o); err != nil {
			return err
		}
		// What a reopened shim does next: ask about its VM.
		if _, err := conn.Info(ctx, "reopen"); err != nil {
			return err
		}
		d := time.Since(start)
		opens = append(opens, d)
		fmt.Printf("reopen %d with the VM running: %v\n", i+1, d.Round(time.Millisecond))
	}
	slices.Sort(opens)
	fmt.Printf("reopen median of %d: %v\n", n, opens[n/2].Round(time.Millisecond))
	return nil
}
