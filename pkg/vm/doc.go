// Package vm is one VM's life on a node, whatever front door asked for it
// (the containerd shim, the CRI server). A front door translates its
// request into a Request and gets a VM: Create does image intake (the
// containerdisk mounted, its qcow2 header checked in Go, internal/qcow2),
// the node's Env (hypervisor, host) opened through the front door's
// Opener, the overhead
// checked against the pod's limit, the pod network taken over, block
// volume nodes, the cloud-init seed, the overlay and the domain; then
// Start (a jailed virtio-fs file server per share of the pod's volumes,
// then QEMU into its cgroup before the guest runs), Wait, Shutdown,
// Stop with grace, Kill, Exec through the guest agent, the console,
// Stats, Update, Delete.
//
// Update (resize.go) resizes the running VM within the maxima it was
// created with (vmpod.io/max-vcpus, vmpod.io/max-memory): vCPUs plugged
// and brought online or taken offline by the guest agent, RAM through the
// VM's virtio-mem device, QEMU's cgroup limits following; it returns only
// when the VM has the new size, reading it from the hypervisor and the
// agent each time so that it holds for an adopted VM too.
//
// The file servers (shares.go) run as a second uid of the pod's, leased
// when the first starts, in a cgroup beside QEMU's under the pod's; each
// ends by itself when QEMU goes, and one that fails while the VM runs
// ends the VM. An adopted VM's servers run on but are not watched: one
// that fails after the adoption leaves the guest's I/O on its share
// hanging until the VM stops (QEMU 7.2 cannot reconnect the device).
//
// What a VM holds on the node (Held) is reported through Request.Record
// before each thing is acquired, for the front door's checkpoint; Undo is
// the one path that removes it, run by Delete and by the cleanup after a
// dead front door from its record alike.
//
// Adopt is Create and Start for a VM that an earlier process of the
// front door made and started and that outlived it (QEMU is not the
// runtime's child): from the Spec, Layout and Network the front door
// kept and the last Held it recorded, it builds the Machine for the
// existing domain (registered with the Runtime, so its stop arrives),
// connects to the serial console again (the log goes on; what the guest
// wrote while nobody was connected is lost), starts the DHCP server on
// the tap again (podnet.Reattach) and loads QEMU's cgroup. The VM it
// returns is a started one in every respect; a domain found stopped
// reports its exit. A failed adoption undoes the record, as Delete would.
//
// Machine is the domain-level part (define, start paused, console,
// events), used by Create and by measurements that need no pod around
// the VM (hack/overhead).
//
// It may import vmspec, convert, host, virt, jail, podnet, podcgroup,
// internal/nsthread and internal/qcow2 (the disk header read, the overlay written),
// containerd's mount, errdefs and log packages, the OCI runtime spec and the
// standard library; never libvirt's binding (the front door's Opener
// brings the connection). The shim and the CRI server import it, never
// the other way round.
package vm
