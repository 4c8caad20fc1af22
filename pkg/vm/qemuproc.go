package vm

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/containerd/log"
	"golang.org/x/sys/unix"

	"github.com/vmpod/vmpod/pkg/virt"
)

// qemuProc is a pidfd on a VM's QEMU, taken while the hypervisor vouched
// for its pid, to learn how QEMU ended when the hypervisor cannot say
// (libvirt sees only its monitor close). QEMU is not the runtime's child
// (libvirt daemonizes it, so init reaps it): its wait status comes from
// the kernel's pidfd exit information (PIDFD_GET_INFO with
// PIDFD_INFO_EXIT, Linux 6.15+, once QEMU was reaped) or, while QEMU is
// still a zombie, from /proc/<pid>/stat (any kernel, but init reaps at
// once on most nodes).
type qemuProc struct {
	pid  int
	fd   int
	logs *logCapper // caps its stderr log, at log, until close
	log  string
}

// openQEMU takes a pidfd on the QEMU info names and has logs cap its log
// (MaxQEMULogBytes); nil if the pidfd cannot be had (QEMU gone already).
// A log that cannot be watched is logged and left uncapped.
func openQEMU(ctx context.Context, logs *logCapper, info virt.Info) *qemuProc {
	if info.PID <= 0 {
		return nil
	}
	fd, err := unix.PidfdOpen(info.PID, 0)
	if err != nil {
		return nil
	}
	p := &qemuProc{pid: info.PID, fd: fd}
	if logs != nil && info.Log != "" {
		if err := logs.watch(info.Log, MaxQEMULogBytes); err != nil {
			log.G(ctx).WithError(err).Warnf("QEMU %d: its log stays uncapped", info.PID)
		} else {
			p.logs, p.log = logs, info.Log
		}
	}
	return p
}

func (p *qemuProc) close() {
	if p != nil {
		unix.Close(p.fd)
		if p.logs != nil {
			p.logs.unwatch(p.log)
		}
	}
}

// qemuStatusWait bounds how long a stop waits to learn QEMU's wait status
// (QEMU exits and is reaped a moment after libvirt saw its monitor close).
var qemuStatusWait = 2 * time.Second

// status waits up to d for QEMU's wait status; false if the kernel would
// not say within d (QEMU still runs, or a kernel before 6.15 and init
// reaped it before it was looked at).
func (p *qemuProc) status(d time.Duration) (unix.WaitStatus, bool) {
	deadline := time.Now().Add(d)
	for {
		if ws, ok := p.pidfdExit(); ok {
			return ws, true
		}
		if ws, ok := p.zombieExit(); ok {
			return ws, true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return 0, false
		}
		// Readable once QEMU exited; then poll for the reap.
		fds := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}}
		if n, err := unix.Poll(fds, int(min(left, 20*time.Millisecond)/time.Millisecond)); n > 0 && err == nil {
			time.Sleep(min(time.Until(deadline), 10*time.Millisecond))
		}
	}
}

// pidfdExit is the exit information the kernel keeps with the pidfd once
// the process was reaped (Linux 6.15+).
func (p *qemuProc) pidfdExit() (unix.WaitStatus, bool) {
	info := unix.PidfdInfo{Mask: unix.PIDFD_INFO_EXIT}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(p.fd), unix.PIDFD_GET_INFO, uintptr(unsafe.Pointer(&info))); errno != 0 {
		return 0, false
	}
	if info.Mask&unix.PIDFD_INFO_EXIT == 0 {
		return 0, false
	}
	return unix.WaitStatus(info.Exit_code), true
}

// zombieExit is the exit code field of /proc/<pid>/stat while QEMU is a
// zombie. The directory is opened first and the pidfd then checked to
// still name a process: the pid cannot have been reused in between, so
// the stat read is QEMU's.
func (p *qemuProc) zombieExit() (unix.WaitStatus, bool) {
	dir, err := os.Open("/proc/" + strconv.Itoa(p.pid))
	if err != nil {
		return 0, false
	}
	defer dir.Close()
	if err := unix.PidfdSendSignal(p.fd, 0, nil, 0); err != nil {
		return 0, false
	}
	b, err := readAt(dir, "stat")
	if err != nil {
		return 0, false
	}
	return parseZombieStat(string(b))
}

func readAt(dir *os.File, name string) ([]byte, error) {
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	buf := make([]byte, 4096)
	n, err := f.Read(buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// parseZombieStat reads the state (field 3) and the exit code (field 52,
// in wait(2)'s encoding) of a /proc/<pid>/stat line; false unless the
// process is a zombie. The command name (field 2) may hold anything
// between its parentheses, so fields are counted after the last ')'.
func parseZombieStat(stat string) (unix.WaitStatus, bool) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3
	if len(f) < 50 || f[0] != "Z" {
		return 0, false
	}
	code, err := strconv.Atoi(f[49])
	if err != nil {
		return 0, false
	}
	return unix.WaitStatus(code), true
}

// signalName is "SIGKILL" for 9, and so on.
func signalName(s unix.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return fmt.Sprintf("signal %d", int(s))
}
