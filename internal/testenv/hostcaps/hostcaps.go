package hostcaps

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/vmpod/vmpod/internal/testenv/repo"
)

// Captures named in more than one package's tests.
const (
	// TCG is a Debian 12 node without KVM.
	TCG = "tcg-debian12"
	// KVM is a node with KVM.
	KVM = "kvm-example"
)

// Dir is pkg/host/testdata in the checkout the test runs in.
func Dir(t testing.TB) string {
	t.Helper()
	return filepath.Join(repo.Root(t), "pkg", "host", "testdata")
}

// Names lists the captures, sorted: the NAME of each NAME.caps.xml.
func Names(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(Dir(t), "*.caps.xml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no pkg/host/testdata/*.caps.xml: %v", err)
	}
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".caps.xml"))
	}
	sort.Strings(names)
	return names
}

// CapsPath is the path of NAME.caps.xml.
func CapsPath(t testing.TB, name string) string {
	t.Helper()
	return filepath.Join(Dir(t), name+".caps.xml")
}

// DomCapsPath is the path of NAME.domcaps.xml, which need not exist.
func DomCapsPath(t testing.TB, name string) string {
	t.Helper()
	return filepath.Join(Dir(t), name+".domcaps.xml")
}

// GoldenPath is the path of NAME.golden.json.
func GoldenPath(t testing.TB, name string) string {
	t.Helper()
	return filepath.Join(Dir(t), name+".golden.json")
}

// Caps is the capabilities XML of the capture.
func Caps(t testing.TB, name string) []byte {
	t.Helper()
	return read(t, CapsPath(t, name))
}

// DomCaps is the domain capabilities XML of the capture, nil when it has
// none.
func DomCaps(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(DomCapsPath(t, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Golden decodes NAME.golden.json into an H: host.Host, or pkg/host's own
// Host in its tests.
func Golden[H any](t testing.TB, name string) H {
	t.Helper()
	var h H
	if err := json.Unmarshal(read(t, GoldenPath(t, name)), &h); err != nil {
		t.Fatalf("%s.golden.json: %v (run go test ./pkg/host -update)", name, err)
	}
	return h
}

func read(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
