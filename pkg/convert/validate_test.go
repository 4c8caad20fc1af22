package convert_test

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// Every golden domain must be valid by libvirt's own schema.
func TestGoldenValidates(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.xml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files (%v)", err)
	}
	if _, err := exec.LookPath("virt-xml-validate"); err != nil {
		t.Fatal("virt-xml-validate is missing: run hack/install-deps.sh (libvirt-clients, libxml2-utils)")
	}
	for _, f := range files {
		out, err := exec.Command("virt-xml-validate", f, "domain").CombinedOutput()
		if err != nil {
			t.Errorf("virt-xml-validate %s: %v\n%s", f, err, out)
		}
	}
}
