package jail

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// EmulatorName is the name of the link to vm-runtime that libvirt starts
// as the domain's emulator; vm-runtime called by that name is the jailer.
const EmulatorName = "vmpod-qemu"

// EnvSpec names the Spec file in the jailer's environment (the domain's
// <qemu:env>).
const EnvSpec = "VMPOD_JAIL"

// Profile names one of the jailer's seccomp filters.
type Profile string

const (
	// ProfileQEMU is QEMU's allow list (seccomp_qemu.go).
	ProfileQEMU Profile = "qemu"
	// ProfileImageTool is qemu-img's deny list (seccomp.go).
	ProfileImageTool Profile = "qemu-img"
	// ProfileVirtiofsd is a virtio-fs file server's deny list
	// (seccomp.go): what it needs to build its own sandbox (its mount,
	// PID and network namespaces, pivot_root, its per-request credentials,
	// its capabilities) and nothing else of ProfileImageTool's list.
	ProfileVirtiofsd Profile = "virtiofsd"
)

// FileServerCapabilities are the capabilities a jail may keep
// (Spec.Capabilities): a virtio-fs file server's, which serves files as
// their owners (CHOWN, DAC_OVERRIDE, FOWNER, FSETID, SETGID, SETUID),
// builds its own sandbox (SYS_ADMIN) and then drops what it does not keep
// (SETPCAP).
var FileServerCapabilities = map[string]uintptr{
	"CAP_CHOWN": unix.CAP_CHOWN, "CAP_DAC_OVERRIDE": unix.CAP_DAC_OVERRIDE, "CAP_FOWNER": unix.CAP_FOWNER,
	"CAP_FSETID": unix.CAP_FSETID, "CAP_SETGID": unix.CAP_SETGID, "CAP_SETUID": unix.CAP_SETUID,
	"CAP_SETPCAP": unix.CAP_SETPCAP, "CAP_SYS_ADMIN": unix.CAP_SYS_ADMIN,
}

// Share is a dir of the pod's volumes a file server serves: shown at its
// own path with what is mounted below it, never chowned or chmodded
// (its files keep the owners and modes the kubelet gave them), nosuid,
// nodev and noexec, and read-only all through when ReadOnly.
type Share struct {
	Path     string `json:"path"`
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// Spec is one VM's jail, or the jail of a tool or file server of its
// (a virtio-fs server for the pod's volumes).
type Spec struct {
	// QEMU is the program the jailer execs: the emulator, or a tool or
	// file server (the JSON name stays "qemu").
	QEMU string `json:"qemu"`
	// UID and GID QEMU runs as; never 0.
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// Root is an empty dir the jail's root is built on (a tmpfs mounted in
	// the jail's own mount namespace; the host sees the empty dir).
	Root string `json:"root"`
	// Writable are dirs (or files) shown read-write at their own paths.
	// A file is given to UID:GID. A dir, and every dir below it, stays
	// root's (made 0755, for QEMU to pass through), and its other files
	// are made read-only (0444): QEMU creates, renames and removes
	// nothing there and writes only what Owned names, so the bytes it can
	// add to the dir are bounded by FileSizeLimit times the files Owned
	// names. QEMU's jail has the VM's dir; qemu-img's has the overlay it
	// makes, or nothing.
	Writable []string `json:"writable,omitempty"`
	// Owned are what QEMU writes below a Writable dir, given to UID:GID: a
	// file (the overlay, the UEFI variable store), or a dir whose device
	// nodes are (the block volumes'; the dir stays root's). One that does
	// not exist when the jailer runs is skipped (no UEFI store on a BIOS
	// guest).
	Owned []string `json:"owned,omitempty"`
	// ReadOnly are files (or dirs) shown read-only at their own paths: the
	// image's disk, kernel and initrd.
	ReadOnly []string `json:"readOnly,omitempty"`
	// SecretDir is libvirt's dir of per-VM files: a file below it that
	// QEMU's command line names (libvirt's master key) is chowned to
	// UID:GID and shown read-only.
	SecretDir string `json:"secretDir,omitempty"`
	// Devices are host character devices below /dev shown in the jail's
	// /dev owned by UID:GID (e.g. /dev/kvm), through nodes Prepare makes in
	// DeviceDir, a dir only root can enter.
	Devices   []string `json:"devices,omitempty"`
	DeviceDir string   `json:"deviceDir,omitempty"`
	// FileSizeLimit is RLIMIT_FSIZE, the largest file QEMU may write (the
	// guest's disk overlay above all); 0 leaves it unlimited.
	FileSizeLimit uint64 `json:"fileSizeLimit,omitempty"`
	// OOMScoreAdj is QEMU's oom_score_adj, the kubelet's for the
	// container (OCI process.oomScoreAdj, CRI oom_score_adj); nil keeps
	// what the jailer inherited from libvirt's process. A value below
	// what the jailer may set without CAP_SYS_RESOURCE is clamped (see
	// setOOMScoreAdj).
	OOMScoreAdj *int `json:"oomScoreAdj,omitempty"`
	// Cgroup is the cgroup the jailer enters, with its limits, before it
	// builds the jail and execs QEMU: QEMU's start-up (its kernel and
	// initrd read, its guest RAM set up) is charged to the container from
	// the first page, not to the runtime that started it. nil: the jailer
	// stays in the cgroup it was started in (qemu-img's runs).
	Cgroup *Cgroup `json:"cgroup,omitempty"`
	// Netns is the pod's network namespace (a path to it, as CNI and the
	// kubelet name it), which the jailer enters before it builds the jail
	// and execs QEMU: QEMU runs in the pod's namespace, while the runtime
	// and its hypervisor library never enter it. The tap QEMU is handed
	// was opened in the node's namespace and moved into this one (pkg/podnet).
	// "": QEMU stays in the jailer's namespace (qemu-img's runs, a VM
	// without a pod network namespace).
	Netns string `json:"netns,omitempty"`
	// Seccomp is the seccomp filter the jailer installs just before the
	// exec (seccomp.go): ProfileQEMU for QEMU, ProfileImageTool for a
	// tool, ProfileVirtiofsd for a file server; "" for none.
	Seccomp Profile `json:"seccompProfile,omitempty"`
	// Shares are the dirs a file server serves (Share).
	Shares []Share `json:"shares,omitempty"`
	// Capabilities are what the program keeps of root's, by name, from
	// FileServerCapabilities only and with ProfileVirtiofsd only: in its
	// bounding, inheritable, permitted, effective and ambient sets, so
	// they survive the exec as UID, with the securebits no_setuid_fixup
	// and noroot set and locked (and keep_caps locked off), so the
	// server's own switches of its effective uid neither clear nor grant
	// any. nil: none (QEMU, tools).
	Capabilities []string `json:"capabilities,omitempty"`
}

// Cgroup is a container's cgroup and its limits. The jailer enters it
// through pkg/podcgroup, on either cgroup driver.
type Cgroup struct {
	// Path is the container's cgroupsPath (OCI linux.cgroupsPath: a
	// cgroupfs path, or systemd's slice:prefix:name).
	Path string `json:"path"`
	// MemoryBytes is the memory limit; 0 for none.
	MemoryBytes uint64 `json:"memoryBytes,omitempty"`
	// CPUShares, CPUQuota and CPUPeriod are the CPU controls (OCI
	// linux.resources.cpu); nil for none.
	CPUShares *uint64 `json:"cpuShares,omitempty"`
	CPUQuota  *int64  `json:"cpuQuota,omitempty"`
	CPUPeriod *uint64 `json:"cpuPeriod,omitempty"`
}

// Validate checks what the jailer relies on.
func (s Spec) Validate() error {
	switch {
	case s.UID == 0 || s.GID == 0:
		return fmt.Errorf("jail: uid %d, gid %d: QEMU never runs as root", s.UID, s.GID)
	case !filepath.IsAbs(s.QEMU):
		return fmt.Errorf("jail: qemu %q: not an absolute path", s.QEMU)
	case !filepath.IsAbs(s.Root) || filepath.Clean(s.Root) == "/":
		return fmt.Errorf("jail: root %q: not an absolute path below /", s.Root)
	case s.Cgroup != nil && s.Cgroup.Path == "":
		return fmt.Errorf("jail: a cgroup without a path")
	case s.Seccomp != "" && s.Seccomp != ProfileQEMU && s.Seccomp != ProfileImageTool && s.Seccomp != ProfileVirtiofsd:
		return fmt.Errorf("jail: seccomp profile %q: want %q, %q, %q or none", s.Seccomp, ProfileQEMU, ProfileImageTool, ProfileVirtiofsd)
	case len(s.Capabilities) > 0 && s.Seccomp != ProfileVirtiofsd:
		return fmt.Errorf("jail: capabilities %v: only a file server's jail (seccomp profile %q) keeps any", s.Capabilities, ProfileVirtiofsd)
	case s.OOMScoreAdj != nil && (*s.OOMScoreAdj < -1000 || *s.OOMScoreAdj > 1000):
		return fmt.Errorf("jail: oom_score_adj %d: not in [-1000, 1000]", *s.OOMScoreAdj)
	}
	for _, c := range s.Capabilities {
		if _, ok := FileServerCapabilities[c]; !ok {
			return fmt.Errorf("jail: capability %q: want one of %s", c, strings.Join(slices.Sorted(maps.Keys(FileServerCapabilities)), ", "))
		}
	}
	for _, sh := range s.Shares {
		if !filepath.IsAbs(sh.Path) || filepath.Clean(sh.Path) != sh.Path || sh.Path == "/" {
			return fmt.Errorf("jail: share %q: not a clean absolute path below /", sh.Path)
		}
	}
	for _, o := range s.Owned {
		if !slices.ContainsFunc(s.Writable, func(w string) bool { return strings.HasPrefix(o, w+"/") }) {
			return fmt.Errorf("jail: owned %q is not below a writable dir %v", o, s.Writable)
		}
	}
	for _, p := range slices.Concat([]string{s.SecretDir, s.DeviceDir, s.Netns}, s.Writable, s.Owned, s.ReadOnly, s.Devices) {
		if p != "" && (!filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/") {
			return fmt.Errorf("jail: path %q: not a clean absolute path below /", p)
		}
	}
	for _, d := range s.Devices {
		if !strings.HasPrefix(d, "/dev/") {
			return fmt.Errorf("jail: device %q is not below /dev", d)
		}
	}
	if len(s.Devices) > 0 && s.DeviceDir == "" {
		return fmt.Errorf("jail: devices %v but no device dir", s.Devices)
	}
	return nil
}

// Prepare makes s's device nodes in s.DeviceDir (anew, root's, 0700),
// each with its host device's numbers, owned by s's uid and gid, 0600.
// The caller runs it before QEMU starts, outside QEMU's devices cgroup.
func Prepare(s Spec) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if len(s.Devices) == 0 {
		return nil
	}
	if err := os.RemoveAll(s.DeviceDir); err != nil {
		return err
	}
	if err := os.Mkdir(s.DeviceDir, 0o700); err != nil {
		return err
	}
	for _, d := range s.Devices {
		var st unix.Stat_t
		if err := unix.Stat(d, &st); err != nil {
			return fmt.Errorf("device %s: %w", d, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFCHR {
			return fmt.Errorf("device %s: not a character device", d)
		}
		node := filepath.Join(s.DeviceDir, strings.TrimPrefix(d, "/dev/"))
		if err := os.MkdirAll(filepath.Dir(node), 0o700); err != nil {
			return err
		}
		if err := unix.Mknod(node, unix.S_IFCHR|0o600, int(st.Rdev)); err != nil {
			return fmt.Errorf("device node for %s: %w", d, err)
		}
		if err := os.Chmod(node, 0o600); err != nil {
			return err
		}
		if err := os.Lchown(node, int(s.UID), int(s.GID)); err != nil {
			return err
		}
	}
	return nil
}

// Write stores s at path (root's, 0600), atomically.
func Write(path string, s Spec) error {
	if err := s.Validate(); err != nil {
		return err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Read loads and validates the Spec at path.
func Read(path string) (Spec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Spec{}, err
	}
	var s Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return Spec{}, fmt.Errorf("jail spec %s: %w", path, err)
	}
	return s, s.Validate()
}

// Program is the jailer a runtime links as its domains' emulator: the
// vmpod-qemu program next to the running executable (cmd/vmpod-qemu,
// installed beside vm-runtime), or else the running executable itself,
// which must call Main when called as EmulatorName (vm-runtime does, and
// the test binaries that start VMs).
func Program() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return "", err
	}
	return program(exe), nil
}

// program is the jailer for the executable exe: the executable file
// EmulatorName next to it, or exe.
func program(exe string) string {
	beside := filepath.Join(filepath.Dir(exe), EmulatorName)
	if fi, err := os.Stat(beside); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 && beside != exe {
		return beside
	}
	return exe
}

// LinkEmulator makes dir/EmulatorName a link to the jailer (Program),
// replacing a link that points elsewhere, and returns its path: the
// domain's emulator.
func LinkEmulator(dir string) (string, error) {
	exe, err := Program()
	if err != nil {
		return "", err
	}
	link := filepath.Join(dir, EmulatorName)
	if target, err := os.Readlink(link); err == nil && target == exe {
		return link, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp := fmt.Sprintf("%s.%d.tmp", link, os.Getpid())
	os.Remove(tmp)
	if err := os.Symlink(exe, tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, link); err != nil {
		os.Remove(tmp)
		return "", err
	}
	return link, nil
}
