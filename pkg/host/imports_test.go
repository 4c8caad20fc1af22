package host

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps the promise in doc.go: Host stays plain data that
// pkg/convert and the scheduler side can use without cgo, I/O or project
// packages.
func TestImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		ast, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range ast.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			stdlib := !strings.Contains(strings.Split(p, "/")[0], ".")
			forbidden := p == "C" || p == "unsafe" || p == "os" || strings.HasPrefix(p, "os/") || p == "net" || strings.HasPrefix(p, "net/")
			if forbidden || !(stdlib || p == "libvirt.org/go/libvirtxml") {
				t.Errorf("%s imports %q; doc.go allows the standard library (no os, net, cgo) and libvirtxml", f, p)
			}
		}
	}
}
