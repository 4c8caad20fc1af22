package vm

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"

	"github.com/vmpod/vmpod/pkg/jail"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// Virtiofsd is the virtio-fs file server run for each share: QEMU 7.2's C
// virtiofsd, which Debian 12 ships in qemu-system-common (it has no
// virtiofsd package of its own).
var Virtiofsd = "/usr/lib/qemu/virtiofsd"

// fileServerCgroup names the file servers' cgroup beside QEMU's, under
// the pod's (podcgroup.Path.Sibling): the pod's limit bounds them, and
// QEMU's cgroup holds QEMU alone.
const fileServerCgroup = "fs"

// virtiofsdArgs are the file server's options for a share whose dir is
// source, with its listening socket as fd 3 (it then writes no pid file):
//   - cache=auto: entries and attributes cached for 1 s, so a ConfigMap
//     the kubelet swaps (its ..data link renamed) shows within a second
//     of the kubelet's write; "always" would keep the old tree a day;
//   - sandbox=namespace: it pivots into source in mount, PID and network
//     namespaces of its own once QEMU connects, before it reads a request;
//   - modcaps: it serves files as their owners (CHOWN, DAC_OVERRIDE,
//     FOWNER, FSETID, SETUID, SETGID) and makes no device node nor
//     file capability;
//   - no POSIX or BSD locks served (the guest's stay in the guest), and
//     only warnings logged.
func virtiofsdArgs(source string) []string {
	return []string{"--fd=3", "-o", "source=" + source, "-o", "cache=auto", "-o", "sandbox=namespace",
		"-o", "modcaps=-mknod:-setfcap", "-o", "no_posix_lock", "-o", "no_flock", "-o", "log_level=warn"}
}

// fileServer is the file server of one share, from its start to its exit.
type fileServer struct {
	share vmspec.Share
	log   string
	done  chan struct{} // closed once it exited and was reaped
	state *os.ProcessState
}

// failure is why the server's exit ends its VM, "" when it does not: a
// server whose QEMU went ends by itself with status 0.
func (fs *fileServer) failure() string {
	if fs.state == nil || fs.state.Success() {
		return ""
	}
	return fmt.Sprintf("the virtio-fs server of the volume at %s ended (%s)%s", fs.share.MountPath, fs.state, logTail(fs.log))
}

// logTail is the end of a file server's log, for an error, "" if it is
// empty.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(strings.TrimSpace(string(b))) == 0 {
		return ""
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 512 {
		s = "..." + s[len(s)-512:]
	}
	return ": " + s
}

// checkShareSources pairs each share of s with its host dir from sources
// (Request.ShareSources), refusing a share without one and one whose
// source is not a dir: virtio-fs serves dirs, so a volume mounted with
// a subPath that names a file cannot be shared.
func checkShareSources(s vmspec.Spec, sources map[string]string) (map[string]string, error) {
	if len(s.Shares) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(s.Shares))
	for _, sh := range s.Shares {
		src := sources[sh.Tag]
		if src == "" {
			return nil, fmt.Errorf("the volume at %s: the front door resolved no host dir for it: %w", sh.MountPath, errdefs.ErrInternal)
		}
		fi, err := os.Stat(src)
		switch {
		case err != nil:
			return nil, fmt.Errorf("the volume at %s: %v: %w", sh.MountPath, err, errdefs.ErrFailedPrecondition)
		case !fi.IsDir():
			return nil, fmt.Errorf("the volume at %s is a file, not a directory (a subPath naming one of the volume's files?): "+
				"a VM pod's guest gets directories only, shared by virtio-fs; mount the whole volume, or a subPath that is a directory: %w",
				sh.MountPath, errdefs.ErrInvalidArgument)
		}
		out[sh.Tag] = src
	}
	return out, nil
}

// startFileServers starts a file server for each of the VM's shares,
// before QEMU, which connects to each at its start. Each listens on its
// ShareSocket (made QEMU's) and runs jailed (pkg/jail, ProfileVirtiofsd)
// as the pod's file server uid with the file-serving capabilities only,
// its share the one dir of the node it sees, read-only all through when
// the share is, in the file servers' cgroup under the pod's. One that
// ends while its VM runs ends the VM (fileServerExited): QEMU 7.2 cannot
// reconnect a vhost-user-fs device, and the guest's I/O on the share
// would hang.
func (v *VM) startFileServers() error {
	if len(v.spec.Shares) == 0 {
		return nil
	}
	if _, err := os.Stat(Virtiofsd); err != nil {
		return fmt.Errorf("the virtio-fs server for the pod's volumes: %v (Debian's qemu-system-common ships it): %w", err, errdefs.ErrFailedPrecondition)
	}
	cg := v.cgPath.Sibling(fileServerCgroup)
	if cg.Raw == "" {
		return fmt.Errorf("the pod's volumes: no cgroup beside QEMU's %s: %w", v.cgPath, errdefs.ErrInternal)
	}
	if err := v.acquire(func(h *Held) { h.FileServerLeases, h.FileServerDir = v.jail.Leases, v.layout.FSDir() }); err != nil {
		return err
	}
	uid, err := leaseFileServerUID(v.jail, v.layout)
	if err != nil {
		return fmt.Errorf("the pod's volumes: %w", err)
	}
	v.fsUID = uid
	if err := v.acquire(func(h *Held) { h.FileServers, h.FileServerCgroup = uid, cg.Raw }); err != nil {
		return err
	}
	if err := os.MkdirAll(v.layout.ShareJailRoot(), 0o700); err != nil {
		return fmt.Errorf("the file servers' jail: %v: %w", err, errdefs.ErrInternal)
	}
	for i, sh := range v.spec.Shares {
		fs, err := v.startFileServer(i, sh, cg.Raw)
		if err != nil {
			return fmt.Errorf("the volume at %s: %w", sh.MountPath, err)
		}
		v.servers = append(v.servers, fs)
	}
	return nil
}

// startFileServer starts the i-th share's file server (startFileServers).
func (v *VM) startFileServer(i int, sh vmspec.Share, cgroup string) (*fileServer, error) {
	l := v.layout
	sock := l.ShareSocket(i)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("its socket: %v: %w", err, errdefs.ErrInternal)
	}
	ln.SetUnlinkOnClose(false) // the socket stays for QEMU; the VM dir's removal takes it
	lf, err := ln.File()
	ln.Close()
	if err != nil {
		return nil, fmt.Errorf("its socket: %v: %w", err, errdefs.ErrInternal)
	}
	defer lf.Close() // the server has its own copy
	// Only QEMU connects: the socket is its, and VMDir is root's.
	if err := os.Chown(sock, int(v.jail.UID), int(v.jail.GID)); err != nil {
		return nil, fmt.Errorf("its socket: %v: %w", err, errdefs.ErrInternal)
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		return nil, fmt.Errorf("its socket: %v: %w", err, errdefs.ErrInternal)
	}
	src := v.shareSources[sh.Tag]
	js := jail.Spec{
		QEMU: Virtiofsd, UID: v.fsUID, GID: v.fsUID,
		Root:         l.ShareJailRoot(),
		Shares:       []jail.Share{{Path: src, ReadOnly: sh.ReadOnly}},
		Capabilities: slices.Sorted(maps.Keys(jail.FileServerCapabilities)),
		Seccomp:      jail.ProfileVirtiofsd,
		Cgroup:       &jail.Cgroup{Path: cgroup},
		OOMScoreAdj:  v.oomScoreAdj,
	}
	if err := jail.Write(l.ShareJailSpec(i), js); err != nil {
		return nil, fmt.Errorf("%v: %w", err, errdefs.ErrInternal)
	}
	fs := &fileServer{share: sh, log: l.ShareLog(i), done: make(chan struct{})}
	logf, err := os.OpenFile(fs.log, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("its log: %v: %w", err, errdefs.ErrInternal)
	}
	defer logf.Close()
	cmd := exec.Command(v.jail.Jailer, virtiofsdArgs(src)...)
	cmd.Env = []string{jail.EnvSpec + "=" + l.ShareJailSpec(i)}
	cmd.ExtraFiles = []*os.File{lf}
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own session: no signal meant for the runtime's process group
	// reaches it, and it outlives the runtime as QEMU does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start its file server: %v: %w", err, errdefs.ErrInternal)
	}
	if v.rt != nil {
		_ = v.rt.logs.watch(fs.log, MaxQEMULogBytes) // uncapped if inotify is short: the server logs warnings only
	}
	go func() {
		_ = cmd.Wait()
		fs.state = cmd.ProcessState
		close(fs.done)
		v.fileServerExited(fs)
	}()
	return fs, nil
}

// fileServerExited ends the VM whose file server fs failed while the VM
// runs, with an exit naming the volume.
func (v *VM) fileServerExited(fs *fileServer) {
	why := fs.failure()
	if why == "" || v.machine == nil {
		return
	}
	if _, stopped := v.machine.Exited(); stopped {
		return
	}
	v.fsMu.Lock()
	if v.fsExit == nil {
		v.fsExit = &Exit{Status: 1, Reason: "Error", Message: why}
	}
	v.fsMu.Unlock()
	_ = v.machine.Kill(context.Background()) // not running (yet, or any more): nothing to end
}

// fileServerFailure is the exit a failed file server gave the VM, nil if
// none did.
func (v *VM) fileServerFailure() *Exit {
	v.fsMu.Lock()
	defer v.fsMu.Unlock()
	return v.fsExit
}

// explainStart adds to err, QEMU's failed start, why a file server that
// ended meanwhile ended (waiting a moment for its exit: QEMU found its
// socket closed as it went).
func (v *VM) explainStart(err error) error {
	deadline := time.After(time.Second)
	for _, fs := range v.servers {
		select {
		case <-fs.done:
		case <-deadline:
			return err
		}
		if why := fs.failure(); why != "" {
			return fmt.Errorf("%w (%s)", err, why)
		}
	}
	return err
}

// stopFileServers stops capping the file servers' logs and removes their
// specs; the servers themselves end with QEMU, and Undo kills any left.
func (v *VM) stopFileServers() error {
	var errs []error
	for i, fs := range v.servers {
		if v.rt != nil {
			v.rt.logs.unwatch(fs.log)
		}
		if err := os.Remove(v.layout.ShareJailSpec(i)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	v.servers = nil
	return errors.Join(errs...)
}

// fileServerState is the VM's part that file servers touch from their
// watchers.
type fileServerState struct {
	fsUID   uint32 // leased by startFileServers
	servers []*fileServer
	fsMu    sync.Mutex
	fsExit  *Exit
}
