package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/node"
	"github.com/vmpod/vmpod/pkg/node/embedded"
	"github.com/vmpod/vmpod/pkg/render"
)

// DefaultCapsCache is the node-wide warm copy of libvirt's QEMU capabilities.
const DefaultCapsCache = "/var/cache/vmpod/qemu-capabilities"

func renderCmd(args []string) int {
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	file := fs.String("f", "", "Pod manifest (YAML or JSON); - for stdin")
	caps := fs.String("capabilities", "", "libvirt capabilities XML of the target node (virsh capabilities); default: this node")
	domCaps := fs.String("domain-capabilities", "", "libvirt domain capabilities XML of the target node (virsh domcapabilities)")
	kvmCache := fs.String("kvm-cache", node.DefaultKVMCache, "this node's KVM probe verdict (probed and written when missing or stale)")
	opts := render.DefaultOptions
	fs.Func("runtime-class", "RuntimeClass names of VM pods, comma-separated (default "+strings.Join(opts.RuntimeClasses, ",")+")", func(v string) error {
		opts.RuntimeClasses = strings.Split(v, ",")
		return nil
	})
	fs.BoolVar(&opts.ImageKernel, "image-kernel", opts.ImageKernel, "assume the image ships /boot/vmlinux and /boot/initrd.img")
	fs.BoolVar(&opts.ImageDisk, "image-disk", opts.ImageDisk, "assume the image ships /disk/disk.qcow2")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *file == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "render: want -f pod.yaml and no other arguments")
		return 2
	}

	var in io.Reader = os.Stdin
	if *file != "-" {
		f, err := os.Open(*file)
		if err != nil {
			fmt.Fprintln(os.Stderr, "render:", err)
			return 1
		}
		defer f.Close()
		in = f
	}
	pod, err := render.DecodePod(in)
	if err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		return 2
	}

	h, err := targetHost(*caps, *domCaps, *kvmCache)
	if err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		return 1
	}
	xml, err := render.Pod(pod, h, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "render: pod %s/%s: %v\n", pod.Namespace, pod.Name, err)
		if render.IsPodError(err) {
			return 2
		}
		return 1
	}
	fmt.Println(xml)
	return 0
}

// targetHost reads the given capability files, or asks this node's QEMU
// through a throwaway embedded libvirt root.
func targetHost(capsFile, domCapsFile, kvmCache string) (host.Host, error) {
	if capsFile != "" {
		return node.FromFiles(capsFile, domCapsFile)
	}
	if domCapsFile != "" {
		return host.Host{}, fmt.Errorf("--domain-capabilities needs --capabilities")
	}
	root, err := os.MkdirTemp("", "vmpod-render-")
	if err != nil {
		return host.Host{}, err
	}
	defer os.RemoveAll(root)
	ctx := context.Background()
	o := node.Options{CapsCache: DefaultCapsCache, KVMCache: kvmCache}
	conn, err := embedded.Open(ctx, root, o)
	if err != nil {
		return host.Host{}, err
	}
	defer conn.Close()
	return node.HostOf(ctx, conn, o)
}
