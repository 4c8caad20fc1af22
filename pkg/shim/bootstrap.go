package shim

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	bootapi "github.com/containerd/containerd/api/runtime/bootstrap/v1"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"google.golang.org/protobuf/proto"
)

// Two kinds of callers run the shim's start command, and containerd 2.4's
// pkg/shim only serves the newer one:
//
//   - containerd 2.3 and later (the bootstrap protocol) write a
//     BootstrapParams protobuf on stdin and read a BootstrapResult protobuf
//     from stdout. vmpod answers version 3: task API v3.
//   - containerd 1.7 (runtime/v2/shim.Command) and CRI-O's runtime_type "vm"
//     (which calls the same function) write nothing on stdin, or the
//     runtime options, and read stdout (containerd 1.7 and older CRI-O:
//     stdout and stderr combined). They take a JSON {"version":2,...} or,
//     when stdout is not such JSON, the whole trimmed text as the ttrpc
//     address and speak task API v2; a version above 2 is refused.
//     pkg/shim refuses these callers with "started through the deprecated
//     API" (empty stdin) or an identity mismatch (runtime options on stdin):
//     that is what Debian's containerd 1.6 hit, and 1.7 hits it too.
//
// startLegacy answers the second kind with the bare address, which every
// one of them reads as version 2 over ttrpc (CRI-O before mid-2026 reads
// nothing else), and writes it to the bundle's "address" file, where
// containerd 1.7 finds the shim again after a restart. The long-lived shim
// serves v2 and v3 on that one socket (taskV2).

// maxStartInput is what pkg/shim reads of start's stdin at most.
const maxStartInput = 10 << 20

// startFlags are pkg/shim's flags: the same command line must parse here
// and there.
type startFlags struct {
	namespace, id, address string
	debug                  bool
	action                 string
}

func parseStartFlags(args []string) (startFlags, bool) {
	var f startFlags
	fs := flag.NewFlagSet("shim", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.BoolVar(&f.debug, "debug", false, "")
	fs.Bool("v", false, "")
	fs.Bool("version", false, "")
	fs.Bool("info", false, "")
	fs.StringVar(&f.namespace, "namespace", "", "")
	fs.StringVar(&f.id, "id", "", "")
	fs.String("socket", "", "")
	fs.String("debug-socket", "", "")
	fs.String("bundle", "", "")
	fs.StringVar(&f.address, "address", "", "")
	fs.String("publish-binary", "", "")
	if err := fs.Parse(args); err != nil {
		return f, false
	}
	f.action = fs.Arg(0)
	return f, true
}

// isBootstrap says whether start's stdin is the bootstrap protocol's, by
// the same test pkg/shim applies: a BootstrapParams for this very task.
func isBootstrap(input []byte, id, namespace string) bool {
	var p bootapi.BootstrapParams
	if len(input) == 0 || proto.Unmarshal(input, &p) != nil {
		return false
	}
	return p.GetInstanceID() == id && p.GetNamespace() == namespace
}

// startLegacy handles the start command when a pre-bootstrap caller runs
// it. It returns false, with stdin intact, for anything else, which
// pkg/shim then handles.
func startLegacy(ctx context.Context, m *Manager, args []string) (bool, error) {
	f, ok := parseStartFlags(args)
	if !ok || f.action != "start" {
		return false, nil
	}
	input, err := io.ReadAll(io.LimitReader(os.Stdin, maxStartInput))
	if err != nil {
		return true, fmt.Errorf("read stdin: %w", err)
	}
	if isBootstrap(input, f.id, f.namespace) {
		return false, restoreStdin(input)
	}
	if f.namespace == "" {
		return true, errors.New("shim namespace cannot be empty")
	}
	level := bootapi.LogLevel_LOG_LEVEL_INFO
	if f.debug {
		level = bootapi.LogLevel_LOG_LEVEL_DEBUG
	}
	params := &bootapi.BootstrapParams{
		InstanceID:             f.id,
		Namespace:              f.namespace,
		LogLevel:               level,
		ContainerdGrpcAddress:  f.address,
		ContainerdTtrpcAddress: os.Getenv("TTRPC_ADDRESS"),
	}
	res, err := m.Start(namespaces.WithNamespace(ctx, f.namespace), params)
	if err != nil {
		return true, err
	}
	if err := writeAddress("address", res.GetAddress()); err != nil {
		return true, err
	}
	_, err = os.Stdout.WriteString(res.GetAddress())
	return true, err
}

// restoreStdin puts back what startLegacy read, for pkg/shim to read.
func restoreStdin(input []byte) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	go func() {
		_, _ = io.Copy(w, bytes.NewReader(input))
		w.Close()
	}()
	os.Stdin = r
	return nil
}

// writeAddress replaces path with address atomically: containerd may read
// it at any time after a restart.
func writeAddress(path, address string) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(address), 0o600); err != nil {
		return fmt.Errorf("shim address file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("shim address file: %w", err)
	}
	return nil
}
