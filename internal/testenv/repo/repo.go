// Package repo finds the vmpod checkout a test runs in, for tests that read
// files outside their own package directory (manifests, scripts, captured
// testdata of another package).
//
// Imports: the standard library only.
package repo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Root is the nearest directory above the working directory (a test's
// package directory) whose go.mod declares github.com/vmpod/vmpod. The
// test fails outside the module.
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/vmpod/vmpod\n") {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("not inside the vmpod module")
		}
		dir = parent
	}
}
