package remote

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// maxAgentReply bounds one reply of the guest agent (the guest is
// untrusted): qemu-ga's guest-exec-status carries up to 16 MiB of each
// output stream, base64.
const maxAgentReply = 64 << 20

// agentCommand sends one command to the QEMU guest agent on its channel
// socket, as libvirt does while it runs: a guest-sync-delimited first, so
// that a reply left over from an earlier client is not taken for this
// one's, then the command, whose whole reply it returns. Errors are
// classified as libvirt's AgentCommand's are (virt.Hypervisor).
func agentCommand(ctx context.Context, path, name, command string, timeout time.Duration) (string, error) {
	subj := fmt.Sprintf("guest agent of domain %q", name)
	deadline := time.Now().Add(max(timeout, time.Second))
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	conn, err := dialNoFollow(ctx, path)
	if err != nil {
		return "", fmt.Errorf("%s: %w: %v", subj, errdefs.ErrUnavailable, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	_ = conn.SetDeadline(deadline)
	unanswered := func(err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("%s: %w: the guest runs no QEMU guest agent, or it does not answer", subj, errdefs.ErrUnavailable)
		}
		return fmt.Errorf("%s: %w: %v", subj, errdefs.ErrUnavailable, err)
	}

	id := rand.Uint32() >> 1
	if _, err := fmt.Fprintf(conn, `{"execute":"guest-sync-delimited","arguments":{"id":%d}}`+"\n", id); err != nil {
		return "", unanswered(err)
	}
	r := bufio.NewReaderSize(conn, 64<<10)
	// The agent answers the sync with 0xFF, then {"return": id}; whatever
	// comes before is a stale reply.
	for skipped := 0; ; {
		b, err := r.ReadByte()
		if err != nil {
			return "", unanswered(err)
		}
		if b == 0xFF {
			break
		}
		if skipped++; skipped > maxAgentReply {
			return "", fmt.Errorf("%s: %w: no sync from the agent in %d bytes", subj, errdefs.ErrUnavailable, maxAgentReply)
		}
	}
	for {
		line, err := readLine(r)
		if err != nil {
			return "", unanswered(err)
		}
		var sync struct {
			Return *uint32 `json:"return"`
		}
		if json.Unmarshal(line, &sync) == nil && sync.Return != nil && *sync.Return == id {
			break
		}
	}

	if _, err := conn.Write([]byte(command + "\n")); err != nil {
		return "", unanswered(err)
	}
	line, err := readLine(r)
	if err != nil {
		return "", unanswered(err)
	}
	var reply struct {
		Return json.RawMessage `json:"return"`
		Error  *struct {
			Class string `json:"class"`
			Desc  string `json:"desc"`
		} `json:"error"`
	}
	if err := json.Unmarshal(line, &reply); err != nil {
		return "", fmt.Errorf("%s: %w: not a QMP reply: %v", subj, errdefs.ErrUnknown, err)
	}
	if reply.Error != nil {
		return "", fmt.Errorf("%s: %w: the agent refused the command: %s", subj, errdefs.ErrInvalidArgument, reply.Error.Desc)
	}
	return string(line), nil
}

// dialNoFollow connects to the unix socket at path, which must be a
// socket and not a link. The runtime keeps the agent's socket out of
// QEMU's dir (pkg/vm's Layout), but a VM started by an earlier version has
// it in the dir QEMU owns, where a compromised QEMU could make it a link
// to another socket on the node.
func dialNoFollow(ctx context.Context, path string) (net.Conn, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("%s is not a socket", path)
	}
	// connect(2) through the descriptor's magic link reaches the very
	// socket checked above.
	var d net.Dialer
	return d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d", fd))
}

// readLine reads one line, at most maxAgentReply long, without its end.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxAgentReply {
			return nil, fmt.Errorf("a reply over %d bytes", maxAgentReply)
		}
		if err == nil {
			return bytes.TrimSpace(line), nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
}
