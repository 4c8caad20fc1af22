package imports

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/vmpod/vmpod/internal/testenv/repo"
)

const module = "github.com/vmpod/vmpod"

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
	CgoFiles   []string
}

// listPackages is `go list -json -deps=false ./...` of the module, with
// every build tag the tree uses.
func listPackages(t *testing.T) map[string]pkg {
	t.Helper()
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-json", "-tags", "e2e,nodevm,systemdnode", "./...")
	cmd.Dir = repo.Root(t)
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("go list: %v: %s", err, exit.Stderr)
		}
		t.Fatal(err)
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs[p.ImportPath] = p
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages", len(pkgs))
	}
	return pkgs
}

// TestConvertIsPure: pkg/convert imports what its doc.go allows and
// nothing that reaches cgo, the filesystem or the network.
func TestConvertIsPure(t *testing.T) {
	pkgs := listPackages(t)
	convert, ok := pkgs[module+"/pkg/convert"]
	if !ok {
		t.Fatal("no pkg/convert")
	}
	allowed := []string{module + "/pkg/vmspec", module + "/pkg/host", "libvirt.org/go/libvirtxml", "github.com/containerd/errdefs"}
	for _, imp := range convert.Imports {
		stdlib := !strings.Contains(strings.Split(imp, "/")[0], ".")
		switch {
		case imp == "C" || imp == "unsafe" || imp == "os" || strings.HasPrefix(imp, "os/") || imp == "net" || strings.HasPrefix(imp, "net/"):
			t.Errorf("pkg/convert imports %s: a pure function of a Spec does no I/O", imp)
		case !stdlib && !slices.Contains(allowed, imp):
			t.Errorf("pkg/convert imports %s; its doc.go allows %v and the standard library", imp, allowed)
		}
	}
	if slices.Contains(convert.Deps, "libvirt.org/go/libvirt") {
		t.Errorf("pkg/convert depends on libvirt's cgo binding")
	}
	// The standard library's net uses cgo when it can; what matters is
	// that convert builds without it.
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", "/dev/null", "./pkg/convert")
	cmd.Dir = repo.Root(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("pkg/convert does not build without cgo: %v: %s", err, out)
	}
}

// TestOneCgoPackage: only pkg/virt/libvirt has cgo files of its own (its
// malloc.go: glibc's malloc knobs for the memory libvirt's threads leave
// in malloc arenas), and only it imports libvirt's cgo binding.
func TestOneCgoPackage(t *testing.T) {
	for path, p := range listPackages(t) {
		if len(p.CgoFiles) > 0 && (path != module+"/pkg/virt/libvirt" || !slices.Equal(p.CgoFiles, []string{"malloc.go"})) {
			t.Errorf("%s has cgo files %v; cgo stays in libvirt's binding, behind pkg/virt/libvirt", path, p.CgoFiles)
		}
		if slices.Contains(p.Imports, "libvirt.org/go/libvirt") && path != module+"/pkg/virt/libvirt" {
			t.Errorf("%s imports libvirt.org/go/libvirt; only pkg/virt/libvirt may", path)
		}
	}
}

// TestFrontDoorsAreThin: a VM's making and undoing is pkg/vm's, the
// node's VMs (their table, checkpoints, exits, exec policy, recovery and
// hypervisor) pkg/vmd's. The shim and the CRI server translate their
// requests and import none of the packages that make a VM's parts (the
// pod network, the domain XML, QEMU's jail spec is set up through
// vm.LeaseJail); the CRI server reaches libvirt only through pkg/vmd;
// pkg/vm opens no libvirt itself (the front door's Opener does) and
// imports no front door, nor does pkg/vmd.
func TestFrontDoorsAreThin(t *testing.T) {
	pkgs := listPackages(t)
	rules := map[string][]string{
		module + "/pkg/shim":       {module + "/pkg/vm", module + "/pkg/vmd", module + "/pkg/virt", module + "/pkg/node", module + "/pkg/podnet", module + "/pkg/convert", module + "/pkg/host", module + "/pkg/virt/libvirt", module + "/pkg/node/embedded"},
		module + "/pkg/vm":         {module + "/pkg/shim", module + "/pkg/cri", module + "/pkg/node", module + "/pkg/virt/libvirt", "libvirt.org/go/libvirt"},
		module + "/pkg/cri":        {module + "/pkg/shim", module + "/pkg/podnet", module + "/pkg/convert", module + "/pkg/host", module + "/pkg/virt/libvirt", module + "/pkg/node/embedded"},
		module + "/pkg/vmd":        {module + "/pkg/shim", module + "/pkg/cri", module + "/pkg/daemon", module + "/pkg/podnet", module + "/pkg/convert", module + "/pkg/host"},
		module + "/pkg/nodeclient": {module + "/pkg/vmd", module + "/pkg/daemon", module + "/pkg/vm"},
		module + "/pkg/daemon":     {module + "/pkg/shim", module + "/pkg/cri", module + "/pkg/podnet", module + "/pkg/convert", module + "/pkg/host", module + "/pkg/virt/libvirt"},
	}
	for path, forbidden := range rules {
		p, ok := pkgs[path]
		if !ok {
			t.Fatalf("no %s", path)
		}
		for _, imp := range p.Imports {
			if slices.Contains(forbidden, imp) {
				t.Errorf("%s imports %s; its doc.go says why it may not", path, imp)
			}
		}
	}
}

// TestShimLinksNoLibvirt: the shim lives as long as its pod, once per VM
// pod, so it links no libvirt (no cgo, no libvirt's libraries and malloc
// in its memory) and no VM core (pkg/vm, pkg/vmd, pkg/virt): the node
// daemon runs the pod's VM, and the shim asks it through pkg/nodeclient;
// nor Kubernetes' API packages. make build builds it with CGO_ENABLED=0.
func TestShimLinksNoLibvirt(t *testing.T) {
	pkgs := listPackages(t)
	for _, path := range []string{module + "/cmd/containerd-shim-vmpod-v2", module + "/pkg/shim", module + "/pkg/nodeclient"} {
		p, ok := pkgs[path]
		if !ok {
			t.Fatalf("no %s", path)
		}
		for _, dep := range p.Deps {
			if dep == "libvirt.org/go/libvirt" || strings.HasPrefix(dep, module+"/pkg/virt") || dep == module+"/pkg/node/embedded" ||
				dep == module+"/pkg/node" || dep == module+"/pkg/vm" || dep == module+"/pkg/vmd" || dep == module+"/pkg/podnet" {
				t.Errorf("%s links %s; the node daemon runs the VM, which the shim asks through pkg/nodeclient", path, dep)
			}
			// Kubernetes' API packages cost every shim their init-time
			// heap (about 0.4 MiB of allocations) for a few strings.
			if strings.HasPrefix(dep, "k8s.io/") || dep == module+"/pkg/vmspec" {
				t.Errorf("%s links %s; the CRI's annotation keys are pkg/ocikeys's", path, dep)
			}
		}
	}
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", os.DevNull, "./cmd/containerd-shim-vmpod-v2")
	cmd.Dir = repo.Root(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("the shim does not build without cgo: %v\n%s", err, out)
	}
}

// TestJailerIsSmall: vmpod-qemu runs three times for every VM start (the
// image's qemu-img info, the overlay's qemu-img create, QEMU), so it links
// only the jail and the cgroup code, builds without cgo, and starts in
// milliseconds where vm-runtime takes about 100 ms to load.
func TestJailerIsSmall(t *testing.T) {
	p, ok := listPackages(t)[module+"/cmd/vmpod-qemu"]
	if !ok {
		t.Fatal("no cmd/vmpod-qemu")
	}
	for _, dep := range p.Deps {
		if strings.HasPrefix(dep, module+"/") && dep != module+"/pkg/jail" && dep != module+"/pkg/podcgroup" {
			t.Errorf("vmpod-qemu links %s; it may link pkg/jail and pkg/podcgroup only", dep)
		}
		if dep == "libvirt.org/go/libvirt" || strings.HasPrefix(dep, "k8s.io/") || strings.HasPrefix(dep, "google.golang.org/grpc") {
			t.Errorf("vmpod-qemu links %s", dep)
		}
	}
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", os.DevNull, "./cmd/vmpod-qemu")
	cmd.Dir = repo.Root(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("vmpod-qemu does not build without cgo: %v\n%s", err, out)
	}
}
