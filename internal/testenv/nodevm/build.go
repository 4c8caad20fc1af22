package nodevm

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// Within one test binary the build runs once; across binaries (parallel
// packages) build.sh takes its own lock.
var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// artifacts is where hack/nodevm/build.sh left vmlinux and initrd.img:
// $VMPOD_NODEVM_DIR, else <repo>/_output/nodevm. The script is cached, so
// this is quick once built.
func artifacts(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() { buildDir, buildErr = build() })
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildDir
}

func build() (string, error) {
	_, file, _, _ := runtime.Caller(0)
	repo := filepath.Join(filepath.Dir(file), "..", "..", "..")
	out := os.Getenv("VMPOD_NODEVM_DIR")
	if out == "" {
		out = filepath.Join(repo, "_output", "nodevm")
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(repo, "hack", "nodevm", "build.sh"), out)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hack/nodevm/build.sh: %v\n%s", err, stderr.String())
	}
	return strings.TrimSpace(stdout.String()), nil
}
