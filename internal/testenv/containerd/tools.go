package containerd

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/vmpod/vmpod/internal/testenv/repo"
)

// Within one test binary the scripts run once; across binaries they take
// their own locks.
var (
	installs [2]struct {
		once sync.Once
		dir  string
		err  error
	}
	pauseOnce sync.Once
	pausePath string
	pauseErr  error
)

// installedBinDir is $VMPOD_CONTAINERD_BIN (2.4) or $VMPOD_CONTAINERD17_BIN
// (1.7), or else the dir the release's install script fills:
// <repo>/_output/bin by hack/containerd/install.sh, or
// <repo>/_output/containerd-1.7/bin by hack/containerd/install-1.7.sh
// (cached: well under a second when done).
func installedBinDir(t testing.TB, r Release) string {
	t.Helper()
	if d := os.Getenv(r.binEnv()); d != "" {
		return d
	}
	if int(r) >= len(installs) {
		t.Fatalf("containerd harness: unknown %v", r)
	}
	repo := repo.Root(t)
	in := &installs[r]
	in.once.Do(func() {
		var script string
		script, in.dir = r.install(repo)
		_, in.err = runScript(t, script, in.dir)
	})
	if in.err != nil {
		t.Fatal(in.err)
	}
	return in.dir
}

// builtPauseArchive is $VMPOD_PAUSE_ARCHIVE, or hack/pause/build.sh's
// archive in <repo>/_output/pause.
func builtPauseArchive(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("VMPOD_PAUSE_ARCHIVE"); p != "" {
		return p
	}
	repo := repo.Root(t)
	pauseOnce.Do(func() {
		var out string
		out, pauseErr = runScript(t, filepath.Join(repo, "hack", "pause", "build.sh"), filepath.Join(repo, "_output", "pause"))
		pausePath = strings.TrimSpace(out)
	})
	if pauseErr != nil {
		t.Fatal(pauseErr)
	}
	return pausePath
}

// runScript runs a hack/ script, passing its stderr progress to t.Log line
// by line, and returns its stdout.
func runScript(t testing.TB, script string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(script, args...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	done := make(chan struct{})
	var lines []string
	go func() {
		defer close(done)
		s := bufio.NewScanner(pr)
		for s.Scan() {
			t.Log(s.Text())
			lines = append(lines, s.Text())
		}
	}()
	err := cmd.Run()
	pw.Close()
	<-done
	if err != nil {
		if len(lines) > 20 {
			lines = lines[len(lines)-20:]
		}
		return "", fmt.Errorf("%s: %w\n%s", filepath.Base(script), err, strings.Join(lines, "\n"))
	}
	return stdout.String(), nil
}
