package cri

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vmpod/vmpod/pkg/vm"
)

// maxExecSyncOutput caps what ExecSync returns of each of stdout and
// stderr, below what pkg/vm keeps (vm.MaxExecOutput): the kubelet's CRI
// client takes replies of at most 16 MiB, and both streams travel in one.
const maxExecSyncOutput = 4 << 20

// ExecSync runs a command in the guest through its QEMU guest agent
// (vm.Exec) and returns its exit code and output: the kubelet's exec
// probes and `crictl exec -s`. The timeout (0: none) ends the wait with
// DeadlineExceeded, as the kubelet expects of a probe that timed out, and
// kills the command in the guest with everything it started
// (vm.Machine.Exec). A
// command the guest cannot run (no agent, no such program) exits 126 or
// 127 with the reason on stderr, as through the shim.
func (s *Server) ExecSync(ctx context.Context, r *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	c, err := s.container(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	if t := r.GetTimeout(); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, time.Duration(t)*time.Second,
			fmt.Errorf("exec timeout of %ds exceeded: %w", t, context.DeadlineExceeded))
		defer cancel()
	}
	if len(r.GetCmd()) == 0 {
		return nil, errorf(errdefs.ErrInvalidArgument, "exec in %s: no command", c.id)
	}
	release, err := s.sessions.open(sessionExec, c.sandboxID)
	if err != nil {
		return nil, err
	}
	defer release()
	res, err := s.execIn(ctx, c, vm.ExecRequest{Args: r.GetCmd()})
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ExecSyncResponse{
		Stdout: capOutput(res.Stdout), Stderr: capOutput(res.Stderr), ExitCode: int32(res.ExitCode),
	}, nil
}

// capOutput keeps at most maxExecSyncOutput bytes of b, saying so at its
// end when it cut.
func capOutput(b []byte) []byte {
	if len(b) <= maxExecSyncOutput {
		return b
	}
	note := fmt.Sprintf("\nvmpod: output cut at %d bytes\n", maxExecSyncOutput)
	return append(b[:maxExecSyncOutput-len(note):maxExecSyncOutput-len(note)], note...)
}
