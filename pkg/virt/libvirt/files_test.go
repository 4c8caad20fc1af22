package libvirt

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMaskCaps: maskCaps takes the one flag out of each cache entry and
// leaves every other byte, and a second pass changes nothing.
func TestMaskCaps(t *testing.T) {
	dir := t.TempDir()
	entry := "<qemuCaps>\n  <emulator>/usr/bin/qemu-system-x86_64</emulator>\n  <flag name='x86-max-cpu'/>\n" +
		"  " + maskedCapsFlag + "\n  <flag name='canonical-cpu-features'/>\n</qemuCaps>\n"
	want := "<qemuCaps>\n  <emulator>/usr/bin/qemu-system-x86_64</emulator>\n  <flag name='x86-max-cpu'/>\n" +
		"  <flag name='canonical-cpu-features'/>\n</qemuCaps>\n"
	clean := "<qemuCaps>\n  <flag name='cpu-unavailable-features-not'/>\n</qemuCaps>\n"
	files := map[string]string{"a.xml": entry, "b.xml": clean, "notes.txt": entry}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	changed, err := maskCaps(dir)
	if err != nil || !changed {
		t.Fatalf("maskCaps = %v, %v; want a change", changed, err)
	}
	for name, want := range map[string]string{"a.xml": want, "b.xml": clean, "notes.txt": entry} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s after maskCaps:\n%s\nwant:\n%s", name, got, want)
		}
	}
	if changed, err := maskCaps(dir); err != nil || changed {
		t.Errorf("second maskCaps = %v, %v; want no change", changed, err)
	}
	if changed, err := maskCaps(filepath.Join(dir, "none")); err != nil || changed {
		t.Errorf("maskCaps of a missing dir = %v, %v; want nothing", changed, err)
	}
}
