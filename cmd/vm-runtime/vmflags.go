package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vmpod/vmpod/pkg/jail"
	"github.com/vmpod/vmpod/pkg/node"
	"github.com/vmpod/vmpod/pkg/node/embedded"
	"github.com/vmpod/vmpod/pkg/vm"
	"github.com/vmpod/vmpod/pkg/vmd"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// vmFlags are the flags of the node's VMs (vmd.Config), which cri and
// daemon both take.
type vmFlags struct {
	stateRoot, capsCache, kvmCache, uids, diskCap *string
	kubeletRoot, volumeHostPaths                  *string
	signingKey, trustKeys                         *string
	defaultMaxVCPUs                               *int
}

func addVMFlags(fs *flag.FlagSet, stateRootHelp string) vmFlags {
	return vmFlags{
		stateRoot: fs.String("state-root", "/var/lib/vmpod", stateRootHelp),
		capsCache: fs.String("capabilities-cache", DefaultCapsCache, "node-wide warm copy of libvirt's QEMU capabilities"),
		kvmCache:  fs.String("kvm-cache", node.DefaultKVMCache, "node-wide KVM probe verdict"),
		uids:      fs.String("qemu-uids", "", "FIRST:COUNT uids for QEMU processes, one per pod (default: the jail's range)"),
		diskCap:   fs.String("disk-cap", "20Gi", "the most a VM's disk overlay may grow to"),
		kubeletRoot: fs.String("kubelet-root-dir", vmspec.DefaultKubeletRoot,
			"the kubelet's --root-dir as mount sources name it (containerd resolves symlinks in them): the pod volumes below it are shared with their VMs' guests"),
		volumeHostPaths: fs.String("volume-host-paths", "",
			"comma-separated host dirs a VM's guest may be given, each with what is below it (for CRI clients such as critest; none by default)"),
		signingKey: fs.String("state-signing-key", "",
			"ed25519 private key (PEM, PKCS #8: openssl genpkey -algorithm ed25519) that signs each checkpoint this node writes (none: unsigned)"),
		trustKeys: fs.String("state-trust-keys", "",
			"comma-separated files of ed25519 public keys (PEM): a checkpoint image is restored only when one of them signed it (none: refused)"),
		defaultMaxVCPUs: fs.Int("default-max-vcpus", vmd.DefaultMaxVCPUs,
			"the most vCPUs a VM whose pod sets no vmpod.io/max-vcpus may grow to live: it gets room up to the node's CPUs, at most this (0: no room; none either for a VM that boots from its disk under TCG)"),
	}
}

// config is what the flags say, once parsed; false after saying on
// stderr, for cmd, what is wrong.
func (f vmFlags) config(cmd string) (vmd.Config, bool) {
	cfg := vmd.Config{StateRoot: *f.stateRoot, CapsCache: *f.capsCache, KVMCache: *f.kvmCache, CapsProbe: capsProbe()}
	if *f.uids != "" {
		r, err := jail.ParseRange(*f.uids)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: --qemu-uids: %v\n", cmd, err)
			return vmd.Config{}, false
		}
		cfg.UIDs = r
	}
	q, err := resource.ParseQuantity(*f.diskCap)
	if err != nil || q.Sign() <= 0 {
		fmt.Fprintf(os.Stderr, "%s: --disk-cap %q: want a positive quantity of bytes such as 20Gi\n", cmd, *f.diskCap)
		return vmd.Config{}, false
	}
	cfg.DiskCap = uint64(q.Value())
	if n := *f.defaultMaxVCPUs; n < 0 || n > vmspec.MaxVCPUs {
		fmt.Fprintf(os.Stderr, "%s: --default-max-vcpus %d: want a whole number of vCPUs from 0 (no default room) to %d\n", cmd, n, vmspec.MaxVCPUs)
		return vmd.Config{}, false
	}
	cfg.DefaultMaxVCPUs = *f.defaultMaxVCPUs
	mounts, err := f.mountRules()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", cmd, err)
		return vmd.Config{}, false
	}
	cfg.Mounts = mounts
	if *f.signingKey != "" {
		if cfg.SigningKey, err = vm.LoadSigningKey(*f.signingKey); err != nil {
			fmt.Fprintf(os.Stderr, "%s: --state-signing-key: %v\n", cmd, err)
			return vmd.Config{}, false
		}
	}
	if *f.trustKeys != "" {
		if cfg.TrustKeys, err = vm.LoadTrustKeys(strings.Split(*f.trustKeys, ",")); err != nil {
			fmt.Fprintf(os.Stderr, "%s: --state-trust-keys: %v\n", cmd, err)
			return vmd.Config{}, false
		}
	}
	return cfg, true
}

// mountRules are the share rules --kubelet-root-dir and
// --volume-host-paths say, or an error naming the flag and its value.
func (f vmFlags) mountRules() (vmspec.MountRules, error) {
	if err := (vmspec.MountRules{KubeletRoot: *f.kubeletRoot}).Validate(); err != nil || *f.kubeletRoot == "" {
		return vmspec.MountRules{}, fmt.Errorf("--kubelet-root-dir %q: want a clean absolute path", *f.kubeletRoot)
	}
	var hostPaths []string
	if *f.volumeHostPaths != "" {
		hostPaths = strings.Split(*f.volumeHostPaths, ",")
	}
	if err := (vmspec.MountRules{HostPaths: hostPaths}).Validate(); err != nil {
		return vmspec.MountRules{}, fmt.Errorf("--volume-host-paths %q: %w", *f.volumeHostPaths, err)
	}
	return vmspec.MountRules{KubeletRoot: *f.kubeletRoot, HostPaths: hostPaths}, nil
}

// capsProbe is this binary's caps-probe command (vmd.Config.CapsProbe),
// nil if the binary cannot be found.
func capsProbe() []string {
	exe, err := os.Executable()
	if err != nil {
		return nil
	}
	return []string{exe, "caps-probe"}
}

// capsProbeCmd is vm-runtime caps-probe --cache DIR --jailer PATH: the
// node daemon and the CRI server run it when the node's capabilities
// cache is cold, so they load the cache rather than hold a probe of their
// own (embedded.Probe).
func capsProbeCmd(args []string) int {
	fs := flag.NewFlagSet("caps-probe", flag.ContinueOnError)
	dir := fs.String("cache", DefaultCapsCache, "the capabilities cache to fill")
	jailer := fs.String("jailer", "", "the emulator the node's domains name, probed too")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := embedded.Probe(context.Background(), *dir, *jailer); err != nil {
		fmt.Fprintf(os.Stderr, "caps-probe: %v\n", err)
		return 1
	}
	return 0
}
