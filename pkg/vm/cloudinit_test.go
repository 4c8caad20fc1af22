package vm_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/vmpod/vmpod/pkg/vm"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

func TestNoCloudFilesInline(t *testing.T) {
	got, err := vm.NoCloudFiles(vmspec.CloudInit{
		UserData: "#cloud-config\n", NetworkConfig: "version: 2\n", SSHKeys: []string{"ssh-ed25519 AAAA me"},
	}, "", "default_web", "web")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"user-data":      "#cloud-config\n",
		"network-config": "version: 2\n",
		"meta-data":      "instance-id: \"default_web\"\nlocal-hostname: \"web\"\npublic-keys:\n  - \"ssh-ed25519 AAAA me\"\n",
	}
	if diff := cmp.Diff(want, strings2(got)); diff != "" {
		t.Errorf("NoCloudFiles (-want +got):\n%s", diff)
	}
}

// A ConfigMap volume's keys are symlinks into ..data, as the kubelet
// writes them; a key pointing out of the volume is refused.
func TestNoCloudFilesFromVolume(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "..2026_12_02")
	must(t, os.Mkdir(data, 0o755))
	must(t, os.WriteFile(filepath.Join(data, "user-data"), []byte("#cloud-config\nhostname: x\n"), 0o644))
	must(t, os.Symlink("..2026_12_02", filepath.Join(dir, "..data")))
	must(t, os.Symlink("..data/user-data", filepath.Join(dir, "user-data")))
	got, err := vm.NoCloudFiles(vmspec.CloudInit{Volume: "seed"}, dir, "i-1", "")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"user-data": "#cloud-config\nhostname: x\n", "meta-data": "instance-id: \"i-1\"\n"}
	if diff := cmp.Diff(want, strings2(got)); diff != "" {
		t.Errorf("NoCloudFiles (-want +got):\n%s", diff)
	}

	must(t, os.Symlink("/etc/passwd", filepath.Join(dir, "meta-data")))
	if _, err := vm.NoCloudFiles(vmspec.CloudInit{Volume: "seed"}, dir, "i-1", ""); err == nil ||
		!strings.Contains(err.Error(), "points outside the volume") {
		t.Errorf("a key linking out of the volume: error %v", err)
	}
}

// The seed is read back by xorriso, an independent ISO 9660 implementation
// (this machine's kernel has no isofs to mount it): label cidata, names
// with dashes intact through Rock Ridge.
func TestNoCloudISO(t *testing.T) {
	dir := t.TempDir()
	iso := filepath.Join(dir, "cidata.iso")
	files := map[string][]byte{"user-data": []byte("#cloud-config\n"), "meta-data": []byte("instance-id: x\n")}
	if err := vm.WriteNoCloudISO(iso, files); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(dir, "out")
	if out, err := exec.Command("xorriso", "-osirrox", "on", "-indev", iso, "-extract", "/", mnt).CombinedOutput(); err != nil {
		t.Fatalf("xorriso extract: %v: %s", err, out)
	}
	if out, err := exec.Command("xorriso", "-indev", iso, "-pvd_info").CombinedOutput(); err != nil ||
		!strings.Contains(string(out), "Volume Id    : cidata") {
		t.Errorf("volume id: %v\n%s", err, out)
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(mnt, name))
		if err != nil || string(got) != string(want) {
			t.Errorf("%s in the mounted seed = %q, %v; want %q", name, got, err, want)
		}
	}
}

func strings2(m map[string][]byte) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = string(v)
	}
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The guest learns its shares from the seed: vmpod-shares for the test
// guest (paths fstab-escaped, in mount path order) and vendor-data
// mounts for cloud-init, each entry a YAML list of quoted strings.
func TestShareSeedFiles(t *testing.T) {
	if got := vm.ShareSeedFiles(nil); got != nil {
		t.Errorf("ShareSeedFiles(nil) = %v, want no files", got)
	}
	shares := []vmspec.Share{vmspec.NewShare(`/srv/a b\c`, false), vmspec.NewShare("/etc/config", true)}
	vmspec.SortShares(shares)
	cfg, odd := vmspec.ShareTag("/etc/config"), vmspec.ShareTag(`/srv/a b\c`)
	want := map[string]string{
		"vmpod-shares": cfg + " ro /etc/config\n" + odd + ` rw /srv/a\040b\134c` + "\n",
		"vendor-data": "#cloud-config\nmounts:\n" +
			`  - ["` + cfg + `", "/etc/config", virtiofs, "ro,nofail", "0", "0"]` + "\n" +
			`  - ["` + odd + `", "/srv/a b\\c", virtiofs, "rw,nofail", "0", "0"]` + "\n",
	}
	got := vm.ShareSeedFiles(shares)
	if diff := cmp.Diff(want, strings2(got)); diff != "" {
		t.Errorf("ShareSeedFiles (-want +got):\n%s", diff)
	}
	var vendor struct{ Mounts [][]string }
	if err := yaml.Unmarshal(got["vendor-data"], &vendor); err != nil {
		t.Fatal(err)
	}
	if len(vendor.Mounts) != 2 || vendor.Mounts[1][1] != `/srv/a b\c` || vendor.Mounts[0][0] != cfg {
		t.Errorf("vendor-data's mounts read back as %q", vendor.Mounts)
	}
}
