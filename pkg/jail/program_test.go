package jail

import (
	"os"
	"path/filepath"
	"testing"
)

// TestProgram: a runtime links the vmpod-qemu program installed next to
// it, and jails QEMU itself when there is none (or none it can run).
func TestProgram(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "vm-runtime")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := program(exe); got != exe {
		t.Errorf("nothing beside: program = %s, want the executable %s", got, exe)
	}
	beside := filepath.Join(dir, EmulatorName)
	if err := os.WriteFile(beside, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := program(exe); got != exe {
		t.Errorf("a vmpod-qemu that is not executable beside: program = %s, want the executable %s", got, exe)
	}
	if err := os.Chmod(beside, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := program(exe); got != beside {
		t.Errorf("program = %s, want %s", got, beside)
	}
	// vmpod-qemu itself (vm-runtime called by that name through a copy).
	if got := program(beside); got != beside {
		t.Errorf("program(%s) = %s, want itself", beside, got)
	}
}
