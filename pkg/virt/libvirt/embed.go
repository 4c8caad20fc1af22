package libvirt

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
	lv "libvirt.org/go/libvirt"
)

// EmbedOptions tune OpenEmbedded.
type EmbedOptions struct {
	// CacheDir holds a host-wide warm copy of libvirt's QEMU capabilities
	// cache (<sha256 of the emulator path>.xml files). The first connect to
	// a new root otherwise probes every installed qemu-system-* for seconds.
	// Empty: no sharing. It is created if missing.
	CacheDir string
	// NoCgroups stops libvirt from making cgroups for QEMU, which then
	// stays in the cgroup of the process that opened the root. A pod's shim
	// wants that: libvirt would otherwise put QEMU under /machine, outside
	// the pod's cgroup and its limits. SetMemoryHardLimit then fails;
	// the caller manages QEMU's cgroup itself.
	NoCgroups bool
	// Emulators are emulator binaries off the PATH that domains will name
	// (vmpod's jailer): their capabilities are probed at open too, and so
	// shared through CacheDir. Without it each new root probes them again
	// at the first Define, for seconds.
	Emulators []string
}

// qemuConf is <root>/etc/qemu.conf. The embedded driver reads it from the
// root instead of /etc/libvirt, so nothing of the host's libvirt applies.
const qemuConf = `# Written by vmpod (pkg/virt/libvirt) on every open; edits are lost.

# There is no virtlogd in a pod: let QEMU write its log and serial files
# itself instead of connecting to a virtlogd that is not there.
stdio_handler = "file"

# libvirt starts the domain's emulator as root with its capabilities: that
# emulator is vmpod's jailer (pkg/jail), which gives QEMU a uid of its own,
# a mount namespace with its VM's files only and no capabilities, and
# chowns those files itself. A domain whose emulator is plain QEMU would
# run as root: vmpod never defines one.
user = "root"
group = "root"
clear_emulator_capabilities = 0

# The jailer makes QEMU's mount namespace; libvirt's own (a private /dev
# made before the emulator starts) would only get in its way.
namespaces = [ ]

# libvirt relabels nothing: the jailer owns the VM's files, and image
# layers and volumes that other pods share must not be chowned (left on,
# libvirt chowns every file the domain names and records the old owner in
# trusted.libvirt.security.* xattrs).
dynamic_ownership = 0

# Same on every node whether or not AppArmor/SELinux is enabled there: the
# jail is the confinement, and libvirt's AppArmor driver would need
# virt-aa-helper and profiles that vmpod does not install.
security_driver = "none"

# QEMU installs its seccomp filter (-sandbox on, with obsolete system
# calls, privilege changes, spawning and resource control denied).
seccomp_sandbox = 1
`

// noCgroupsConf is appended for EmbedOptions.NoCgroups.
const noCgroupsConf = `
# The caller keeps QEMU in its own (the pod's) cgroup.
cgroup_controllers = [ ]
`

var embedded struct {
	mu   sync.Mutex
	root string
}

// OpenEmbedded opens libvirt's QEMU driver inside this process on root
// (qemu:///embed?root=<root>), so QEMU runs as a child of this process's
// environment (its network namespace in particular) without a libvirtd.
//
// libvirt allows one embed root per process: a second root fails with
// FailedPrecondition. Reopening the same root is fine and re-attaches to
// the QEMU processes a previous connection or process started.
//
// Opening probes QEMU's capabilities now (seconds on a cold root, well under
// a second with a warm CacheDir) rather than at the first Define.
func OpenEmbedded(ctx context.Context, root string, opts EmbedOptions) (_ *Conn, retErr error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("embed root %q: %w: %v", root, errdefs.ErrInvalidArgument, err)
	}
	embedded.mu.Lock()
	defer embedded.mu.Unlock()
	if embedded.root != "" && embedded.root != root {
		return nil, fmt.Errorf("embed root %q: %w: this process already uses %q and libvirt allows one per process",
			root, errdefs.ErrFailedPrecondition, embedded.root)
	}

	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		return nil, fmt.Errorf("embed root: %w: %v", errdefs.ErrInternal, err)
	}
	conf := qemuConf
	if opts.NoCgroups {
		conf += noCgroupsConf
	}
	if err := writeFileAtomic(filepath.Join(root, "etc", "qemu.conf"), []byte(conf), 0o644); err != nil {
		return nil, fmt.Errorf("embed root: %w: %v", errdefs.ErrInternal, err)
	}
	capsDir := filepath.Join(root, "cache", "qemu", "capabilities")
	if opts.CacheDir != "" {
		if err := copyCaps(opts.CacheDir, capsDir, false); err != nil {
			return nil, fmt.Errorf("warm capabilities cache: %w: %v", errdefs.ErrInternal, err)
		}
	}

	// libvirt logs to stderr by default, warnings included (one for
	// security_driver = "none" on every open, noise in `vm-runtime render`
	// and in a shim's log). Every failure also comes back to us as an
	// error, so its log goes to the root unless the user chose otherwise.
	// libvirt reads this once, at its first connection in the process.
	if os.Getenv("LIBVIRT_LOG_OUTPUTS") == "" {
		if err := os.MkdirAll(filepath.Join(root, "log"), 0o755); err == nil {
			os.Setenv("LIBVIRT_LOG_OUTPUTS", "3:file:"+filepath.Join(root, "log", "libvirt.log"))
		}
	}

	alignModuleTimes()
	if _, err := maskCaps(capsDir); err != nil {
		return nil, fmt.Errorf("capabilities cache: %w: %v", errdefs.ErrInternal, err)
	}
	c, err := openProbed(ctx, root, opts)
	if err != nil {
		return nil, err
	}
	// A probe on this open wrote fresh entries with the flag. libvirt
	// holds them in this process as probed for as long as it lives
	// (closing and reopening the embedded driver does not reload them), so
	// only later processes gain: mask the entries for them. The node
	// daemon and the CRI server have a cold cache probed in a process of
	// their own instead (node.Options.ProbeArgv).
	if _, err := maskCaps(capsDir); err != nil {
		c.Close()
		return nil, fmt.Errorf("capabilities cache: %w: %v", errdefs.ErrInternal, err)
	}
	if opts.CacheDir != "" {
		if err := copyCaps(capsDir, opts.CacheDir, true); err != nil {
			c.Close()
			return nil, fmt.Errorf("share capabilities cache: %w: %v", errdefs.ErrInternal, err)
		}
	}
	return c, nil
}

// openProbed opens the embedded driver on root (embedded.mu held) and
// has it load or probe the capabilities of every emulator it will run.
func openProbed(ctx context.Context, root string, opts EmbedOptions) (_ *Conn, retErr error) {
	uri := "qemu:///embed?root=" + url.QueryEscape(root)
	var c *Conn
	err := onOneCPU(func() error {
		var err error
		if c, err = open(ctx, uri, root); err != nil {
			return err
		}
		// libvirt's driver is now bound to root for the life of the
		// process, whatever fails below.
		embedded.root = root
		// Host capabilities make libvirt probe (or validate the cache of)
		// every emulator it finds; doing it now makes the cost visible at
		// open and gives the copy-back below something to copy.
		if _, err := c.conn.GetCapabilities(); err != nil {
			return classify(err, "probe QEMU capabilities")
		}
		for _, e := range opts.Emulators {
			// The domain capabilities of an emulator need its
			// capabilities: libvirt probes it, or validates its cache entry.
			if _, err := c.conn.GetDomainCapabilities(e, "", "", "qemu", 0); err != nil {
				return classify(err, "probe the capabilities of emulator "+e)
			}
		}
		return nil
	})
	if c == nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			_ = c.Close()
		}
	}()
	if err != nil {
		return nil, err
	}
	c.shutdownFlags = lv.DOMAIN_SHUTDOWN_ACPI_POWER_BTN
	c.undefineFlags = lv.DOMAIN_UNDEFINE_NVRAM | lv.DOMAIN_UNDEFINE_MANAGED_SAVE |
		lv.DOMAIN_UNDEFINE_SNAPSHOTS_METADATA | lv.DOMAIN_UNDEFINE_CHECKPOINTS_METADATA

	c.awaitReconnect()
	return c, nil
}

// awaitReconnect returns once libvirt has re-attached to the QEMUs a
// previous process left running. libvirt does that in a background thread
// per domain, holding the domain's job; until it is done, Destroy (which
// kills before it takes the job) races it: libvirt 9.0 then reports "not
// running", marks the domain shutoff/failed without a Stopped event and
// leaves its cgroups behind. A call that takes the job waits the re-attach
// out. Errors are ignored: a QEMU that died meanwhile is simply shut off.
func (c *Conn) awaitReconnect() {
	doms, err := c.conn.ListAllDomains(lv.CONNECT_LIST_DOMAINS_ACTIVE)
	if err != nil {
		return
	}
	for i := range doms {
		_, _ = doms[i].MemoryStats(uint32(lv.DOMAIN_MEMORY_STAT_NR), 0)
		_ = doms[i].Free()
	}
}

// onOneCPU runs f with this thread pinned to the lowest CPU the process
// may use. libvirt checks its capabilities cache against the cpuid of the
// CPU the check runs on; where CPUs answer cpuid differently (some nested
// hypervisors do), the cache is thrown away, and every QEMU binary probed
// again for seconds, whenever the check lands on another CPU than the one
// that wrote it. Pinned, it always runs on the same one. Threads made
// meanwhile (libvirt's, Go's) inherit the pin, so afterwards every thread
// of the process still pinned to that one CPU gets the CPU set back.
func onOneCPU(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil || all.Count() < 2 {
		return f()
	}
	var one unix.CPUSet
	for cpu := 0; ; cpu++ {
		if all.IsSet(cpu) {
			one.Set(cpu)
			break
		}
	}
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		return f()
	}
	defer func() {
		tids, _ := os.ReadDir("/proc/self/task")
		for _, t := range tids {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			var set unix.CPUSet
			if unix.SchedGetaffinity(tid, &set) == nil && set == one {
				_ = unix.SchedSetaffinity(tid, &all)
			}
		}
	}()
	return f()
}

// ColdCache says the capabilities cache at dir (EmbedOptions.CacheDir)
// lacks what an open with these Emulators needs: it has no entry at all,
// none for one of emulators (libvirt names an entry after the SHA-256 of
// the emulator's path), or one another build of libvirt probed, so the
// open will probe QEMU for seconds. It first steadies libvirt's age
// (alignModuleTimes), which the entries are checked against.
func ColdCache(dir string, emulators []string) bool {
	alignModuleTimes()
	entries, _ := filepath.Glob(filepath.Join(dir, "*.xml"))
	if len(entries) == 0 {
		return true
	}
	for _, e := range entries {
		if data, err := os.ReadFile(e); err != nil || staleEntry(data) {
			return true
		}
	}
	for _, e := range emulators {
		sum := sha256.Sum256([]byte(e))
		if _, err := os.Stat(filepath.Join(dir, hex.EncodeToString(sum[:])+".xml")); err != nil {
			return true
		}
	}
	return false
}
