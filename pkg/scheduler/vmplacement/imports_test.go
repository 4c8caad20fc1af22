package vmplacement_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImports keeps the promise in doc.go: of vmpod, the plugin depends on
// pkg/vmspec alone (and pkg/ocikeys, its constants without imports; never
// convert, virt, vm or host), and on no cgo libvirt binding, directly or
// through another package.
func TestImports(t *testing.T) {
	const self = "github.com/vmpod/vmpod/pkg/scheduler/vmplacement"
	out, err := exec.Command("go", "list", "-deps", self).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	allowed := map[string]bool{self: true, "github.com/vmpod/vmpod/pkg/vmspec": true, "github.com/vmpod/vmpod/pkg/ocikeys": true}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/vmpod/vmpod/") && !allowed[p] {
			t.Errorf("%s depends on %s; it may use pkg/vmspec only", self, p)
		}
		if strings.HasPrefix(p, "libvirt.org/") {
			t.Errorf("%s depends on %s", self, p)
		}
	}
}
