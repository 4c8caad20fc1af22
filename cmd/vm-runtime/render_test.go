package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmpod/vmpod/internal/testenv/hostcaps"
)

// The binary is built once and run as a user would run it.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vm-runtime-test-")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "vm-runtime")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		panic(string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func vmRuntime(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return o.String(), e.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), 0
}

// nodeFlags are render's flags for the node of a golden host capture.
func nodeFlags(t *testing.T, name string) []string {
	return []string{"--capabilities", hostcaps.CapsPath(t, name), "--domain-capabilities", hostcaps.DomCapsPath(t, name)}
}

// Every example renders to XML that libvirt's schema accepts, on a TCG
// node, on a KVM node, and on this very node (through the embedded driver).
func TestRenderExamples(t *testing.T) {
	examples, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(examples) == 0 {
		t.Fatalf("no examples (%v)", err)
	}
	nodes := map[string][]string{
		"tcg":       nodeFlags(t, hostcaps.TCG),
		"kvm":       nodeFlags(t, hostcaps.KVM),
		"this-node": nil,
	}
	for _, ex := range examples {
		for node, flags := range nodes {
			t.Run(filepath.Base(ex)+"/"+node, func(t *testing.T) {
				out, errOut, code := vmRuntime(t, append([]string{"render", "-f", ex}, flags...)...)
				if code != 0 {
					t.Fatalf("exit %d: %s", code, errOut)
				}
				if !strings.HasPrefix(out, "<domain type=") {
					t.Fatalf("not a domain: %.200s", out)
				}
				f := filepath.Join(t.TempDir(), "domain.xml")
				if err := os.WriteFile(f, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
				if v, err := exec.Command("virt-xml-validate", f, "domain").CombinedOutput(); err != nil {
					t.Errorf("virt-xml-validate: %v\n%s", err, v)
				}
			})
		}
	}
}

func TestRenderErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"bad annotation", []string{"-f", "testdata/bad-firmware.yaml"}, 2, `vmpod.io/firmware: "efi" is not one of bios, uefi`},
		{"not a VM pod", []string{"-f", "testdata/not-a-vm.yaml"}, 2, `spec.runtimeClassName: "" is not one of vmpod, vmpod-small`},
		{"typo in the manifest", []string{"-f", "testdata/typo.yaml"}, 2, `unknown field "resoures"`},
		{"kvm pod on a tcg node", append([]string{"-f", "../../examples/test-guest.yaml"}, nodeFlags(t, hostcaps.TCG)...), 0, ""},
		{"missing file", []string{"-f", "testdata/nope.yaml"}, 1, "no such file"},
		{"no -f", nil, 2, "want -f pod.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errOut, code := vmRuntime(t, append([]string{"render"}, tt.args...)...)
			if code != tt.code || !strings.Contains(errOut, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and stderr containing %q", code, errOut, tt.code, tt.want)
			}
		})
	}
}

// A pod that requires KVM cannot be rendered for a TCG-only node, and the
// error says why; the same pod renders for a KVM node.
func TestRenderKVMRequired(t *testing.T) {
	pod := filepath.Join(t.TempDir(), "kvm.yaml")
	manifest, err := os.ReadFile("../../examples/test-guest.yaml")
	if err != nil {
		t.Fatal(err)
	}
	manifest = []byte(strings.Replace(string(manifest), "  name: test-guest\n",
		"  name: test-guest\n  annotations:\n    vmpod.io/accel: kvm\n", 1))
	if err := os.WriteFile(pod, manifest, 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := vmRuntime(t, append([]string{"render", "-f", pod}, nodeFlags(t, hostcaps.TCG)...)...)
	if code != 2 || !strings.Contains(errOut, `vmpod.io/accel: "kvm": the node has no KVM`) {
		t.Errorf("TCG node: exit %d, stderr %q", code, errOut)
	}
	out, errOut, code := vmRuntime(t, append([]string{"render", "-f", pod}, nodeFlags(t, hostcaps.KVM)...)...)
	if code != 0 || !strings.HasPrefix(out, `<domain type="kvm">`) {
		t.Errorf("KVM node: exit %d, stderr %q, out %.60q", code, errOut, out)
	}
}
