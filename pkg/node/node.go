package node

import (
	"context"
	"fmt"
	"os"

	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/virt"
)

// Host asks hv what this node can run, with KVM only where kvm, the
// probe's verdict (CheckKVM), says a guest ran under it. libvirt offers
// KVM wherever /dev/kvm opens, including where no guest can run.
func Host(ctx context.Context, hv virt.Hypervisor, kvm KVM) (host.Host, error) {
	virtType, opts := "", []host.Option{host.WithFiles(exists)}
	if !kvm.Usable {
		virtType = string(host.AccelTCG)
		opts = append(opts, host.WithoutKVM(kvm.Reason))
	}
	caps, domCaps, err := hv.Capabilities(ctx, virtType)
	if err != nil {
		return host.Host{}, fmt.Errorf("node capabilities: %w", err)
	}
	return host.Parse([]byte(caps), []byte(domCaps), opts...)
}

// FromFiles reads a node's capabilities saved with `virsh capabilities`
// and, optionally, `virsh domcapabilities` ("" for none).
func FromFiles(capsFile, domCapsFile string) (host.Host, error) {
	caps, err := os.ReadFile(capsFile)
	if err != nil {
		return host.Host{}, err
	}
	var domCaps []byte
	if domCapsFile != "" {
		if domCaps, err = os.ReadFile(domCapsFile); err != nil {
			return host.Host{}, err
		}
	}
	return host.Parse(caps, domCaps)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
