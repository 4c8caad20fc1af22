package remote

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"

	"golang.org/x/sys/unix"
)

// HelperFD is the descriptor a helper started by Exec finds its connection
// on.
const HelperFD = 3

// Exec is a Spawn that starts newCmd()'s process with one end of a socket
// pair as its descriptor HelperFD (its Serve's connection). The command's
// own stdio and environment are newCmd's to set.
func Exec(newCmd func() *exec.Cmd) func(ctx context.Context) (Helper, error) {
	return func(ctx context.Context) (Helper, error) {
		if err := ctx.Err(); err != nil {
			return Helper{}, err
		}
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return Helper{}, fmt.Errorf("socketpair: %w", err)
		}
		ours, theirs := os.NewFile(uintptr(fds[0]), "hypervisor"), os.NewFile(uintptr(fds[1]), "hypervisor")
		defer ours.Close()
		cmd := newCmd()
		cmd.ExtraFiles = []*os.File{theirs}
		err = cmd.Start()
		theirs.Close()
		if err != nil {
			return Helper{}, fmt.Errorf("%s: %w", cmd.Path, err)
		}
		conn, err := net.FileConn(ours)
		if err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return Helper{}, err
		}
		return Helper{Conn: conn, Wait: cmd.Wait, Kill: func() { _ = cmd.Process.Kill() }}, nil
	}
}

// HelperConn is, in a helper started by Exec, its connection to the Client.
func HelperConn() (net.Conn, error) {
	f := os.NewFile(HelperFD, "hypervisor")
	defer f.Close()
	conn, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("descriptor %d is not the Client's connection (start this through a vmpod shim): %w", HelperFD, err)
	}
	return conn, nil
}
