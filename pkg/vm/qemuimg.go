package vm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/containerd/errdefs"

	"github.com/vmpod/vmpod/pkg/jail"
)

// qemuImgJail runs qemu-img in the jail of the pod's QEMU (pkg/jail), for
// qemu-img parses the pod author's disk before QEMU ever runs: as the
// pod's QEMU uid, with no capability, no_new_privs and the jailer's own
// seccomp filter (qemu-img has no -sandbox), in a mount namespace that
// shows it the system (/usr) and the files it works on, and nothing else
// of the host: not the image's other files, not the pod's dir, not the
// VM's other files.
type qemuImgJail struct {
	// Jail is the pod's: the jailer, the uid and gid, the disk cap.
	Jail Jail
	// Layout is the pod's: the jail's spec and root are made in its Dir,
	// which only root can enter, and removed after the run.
	Layout Layout
}

// run runs qemu-img with args, shown readOnly and writable (files that
// exist: the jail binds them, and writable ones are given to the uid).
// The error is Internal when the jail failed; otherwise it is qemu-img's
// own, with its stderr, for the caller to classify.
func (q qemuImgJail) run(ctx context.Context, readOnly, writable []string, args ...string) (stdout, stderr []byte, err error) {
	if q.Jail.Jailer == "" || q.Jail.UID == 0 || q.Jail.GID == 0 {
		return nil, nil, fmt.Errorf("qemu-img has no jail (jailer %q, uid %d, gid %d): %w", q.Jail.Jailer, q.Jail.UID, q.Jail.GID, errdefs.ErrInternal)
	}
	internal := func(err error) ([]byte, []byte, error) {
		return nil, nil, fmt.Errorf("qemu-img's jail: %v: %w", err, errdefs.ErrInternal)
	}
	bin, err := exec.LookPath("qemu-img")
	if err != nil {
		return internal(err)
	}
	if bin, err = filepath.Abs(bin); err != nil {
		return internal(err)
	}
	if err := os.MkdirAll(q.Layout.Dir, 0o700); err != nil {
		return internal(err)
	}
	dir, err := os.MkdirTemp(q.Layout.Dir, "qemu-img-")
	if err != nil {
		return internal(err)
	}
	defer os.RemoveAll(dir) // the jail's mounts were in its own namespace
	s := jail.Spec{
		QEMU: bin, UID: q.Jail.UID, GID: q.Jail.GID,
		Root:          filepath.Join(dir, "root"),
		Writable:      writable,
		ReadOnly:      readOnly,
		FileSizeLimit: q.Jail.DiskCap,
		Seccomp:       jail.ProfileImageTool,
	}
	if err := os.Mkdir(s.Root, 0o700); err != nil {
		return internal(err)
	}
	spec := filepath.Join(dir, "jail.json")
	if err := jail.Write(spec, s); err != nil {
		return internal(err)
	}

	cmd := exec.CommandContext(ctx, q.Jail.Jailer, args...)
	cmd.Env = []string{jail.EnvSpec + "=" + spec, "PATH=/usr/bin:/bin"}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == jail.ExitFailed {
		return internal(fmt.Errorf("%s", bytes.TrimSpace(errb.Bytes())))
	}
	if err != nil && !errors.As(err, &exit) {
		return internal(err) // the jailer did not start
	}
	return out.Bytes(), errb.Bytes(), err
}
