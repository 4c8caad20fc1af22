// Command vm-runtime is vmpod's node binary. Each subcommand is wired here
// and implemented in pkg/.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/vmpod/vmpod/internal/memdebug"
	"github.com/vmpod/vmpod/pkg/jail"
	"github.com/vmpod/vmpod/pkg/shim"
)

const usage = `vm-runtime runs virtual machines as Kubernetes pods.

Usage:
  vm-runtime shim [containerd shim flags] start|delete
      containerd's runtime v2 shim for RuntimeClass handlers with
      runtime_type io.containerd.vmpod.v2 (containerd runs it as
      containerd-shim-vmpod-v2, a link to this binary); it asks the node
      daemon (below, at $VMPOD_NODE_SOCKET) to run the pod's VM.
  vm-runtime cri [--listen unix:///run/vmpod/cri.sock] [--state-root /var/lib/vmpod]
                 [--cni-conf-dir /etc/cni/net.d] [--cni-bin-dir /opt/cni/bin,/usr/lib/cni]
                 [--stream-address 127.0.0.1:0] [--default-cgroup-parent /vmpod]
                 [--metrics-address HOST:PORT]
      A CRI server (runtime and image services) for VM-only nodes whose
      kubelet's containerRuntimeEndpoint points at it: every pod is a VM.
      exec runs commands through the guest agent, attach is the serial
      console, port-forward reaches the pod IP; their streams are served on
      --stream-address, which the kubelet connects to. With
      --metrics-address, Prometheus metrics of the node's VMs at /metrics
      (docs/metrics.md).
  vm-runtime daemon [--socket /run/vmpod/vmd.sock] [--state-root /var/lib/vmpod]
                    [--qemu-uids FIRST:COUNT] [--disk-cap 20Gi] [--metrics-address HOST:PORT]
      The node daemon: every VM of the node (one libvirt, their checkpoints,
      exits, exec and console), served over the node API (ttrpc,
      api/node/v1) on a root-only socket to the containerd shims. A
      restarted daemon takes the running VMs over.
  vm-runtime caps-probe --cache DIR [--jailer PATH]
      Fill the node's libvirt capabilities cache by probing QEMU (and the
      jailer) in this process; the daemon and the CRI server run it when
      the cache is cold, so they load it as vmpod trims it.
  vm-runtime render -f pod.yaml [--capabilities caps.xml [--domain-capabilities domcaps.xml]]
      Print the libvirt domain XML the pod becomes on this node (or on the
      node whose capabilities are given). Exit 2 if the pod is invalid.
  vm-runtime labeller --node-name NAME [--kubeconfig path] [--interval 5m] [--once]
                      [--capabilities caps.xml --domain-capabilities domcaps.xml]
      Keep the node's vmpod labels (docs/labels.md) in step with what its
      QEMU can run; in-cluster config without --kubeconfig.
  vm-runtime checkpoint-image --archive checkpoint.tar --base containerdisk.oci.tar --name REF -o out.oci.tar
      Put a VM pod's checkpoint (the archive the kubelet's checkpoint API
      wrote) into the containerdisk it ran from: a pod of the new image
      starts where the VM was, on a node that trusts the checkpoint's
      signing key (docs/day2.md).

Called as vmpod-qemu (a link the daemon and the CRI server make), it is the jailer libvirt
starts in place of QEMU: see pkg/jail.
`

func main() {
	os.Exit(run(filepath.Base(os.Args[0]), os.Args[1:]))
}

// shimName is the binary containerd looks for on PATH for
// runtime_type io.containerd.vmpod.v2.
const shimName = "containerd-shim-vmpod-v2"

func run(argv0 string, args []string) int {
	if argv0 == jail.EmulatorName {
		// libvirt starts this as the domain's emulator, with QEMU's arguments.
		return jail.Main(args)
	}
	if argv0 == shimName {
		if len(args) > 0 && args[0] == "shim" {
			args = args[1:]
		}
		memdebug.Start()
		shim.Run(argv0, args)
		return 0
	}
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	switch args[0] {
	case "shim":
		memdebug.Start()
		shim.Run(argv0, args[1:])
		return 0
	case "cri":
		return criCmd(args[1:])
	case "daemon":
		return daemonCmd(args[1:])
	case "caps-probe":
		return capsProbeCmd(args[1:])
	case "render":
		return renderCmd(args[1:])
	case "labeller":
		return labellerCmd(args[1:])
	case "checkpoint-image":
		return checkpointImageCmd(args[1:])
	case "-h", "--help", "help":
		fmt.Print(usage)
		return 0
	default:
		fmt.Fprintf(os.Stderr, "vm-runtime: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}
