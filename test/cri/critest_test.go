package cri_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/vmpod/vmpod/internal/testenv/repo"
	"github.com/vmpod/vmpod/internal/testguest"
)

// critestSkips are the critest specs TestCritest skips (ginkgo's
// --ginkgo.skip, a regexp over the spec's full text), each with why and
// how many specs of critest v1.37.0 it skips. Everything else must pass:
// TestCritest fails on any other spec that fails, on a pattern that skips
// another number of specs than it says (none above all: a pattern that
// matches nothing hides nothing and must go), and on a spec two patterns
// skip. pkg/cri's doc.go NOTES and docs/install.md give the counts.
var critestSkips = []struct {
	spec, reason string
	count        int
}{
	// A VM's programs are the guest kernel's: no OCI process to confine.
	{`AppArmor`, "AppArmor confines a host process; a VM's programs run under the guest kernel", 9},
	// Security Context: properties of a Linux process on the host; a VM's
	// programs run under the guest kernel, as root there, and QEMU is
	// jailed by vmpod. (Those it passes run: no host network, nothing
	// stops the guest setting its hostname.)
	{`Security Context NamespaceOption runtime should support (ContainerPID|HostIpc is true|HostNetwork is true|HostPID)$`, "sharing the host's PID, IPC or network namespace with a process, or a PID namespace of the container's own whose first process is its command; a VM has its own kernel, its init first, and a VM pod its own network", 4},
	{`Security Context NamespaceOption runtime should support HostIpc is false$`, "it lists the container's shared memory with ipcs, which the test guest's busybox lacks; a VM never shares the node's IPC namespace (pkg/jail gives QEMU one of its own, and the guest has its own kernel)", 1},
	{`Security Context NoNewPrivs`, "no_new_privs of a host process", 2},
	{`Security Context SeccompProfilePath (runtime should ignore a seccomp profile that blocks|runtime should support an seccomp profile that blocks|should support seccomp default|should support seccomp localhost)`, "a seccomp filter on a host process; the guest's syscalls go to the guest kernel", 4},
	{`Security Context SupplementalGroupsPolicy`, "the groups of a host process, from the image's /etc/group", 2},
	{`Security Context UserNamespaces`, "user namespaces of a host process; the guest has its own uids", 6},
	{`Security Context bucket runtime should (return error if RunAsGroup|support (MaskedPaths|Privileged|ReadonlyPaths|RunAs|SupplementalGroups|adding capability|dropping|that ReadOnlyRootfs))`, "the user, groups, capabilities, masked and read-only paths, read-only rootfs or privilege of a host process", 14},
	{`PodSandbox runtime should support sysctls`, "sysctls of the pod's kernel namespaces; the guest has a kernel of its own", 2},
	{`Container OOM`, "the guest's own OOM killer acts inside the VM; no container process is OOM-killed on the host", 1},
	// The container's command: a VM runs its image's kernel and init.
	{`should support log runtime should support starting container with log`, "the log is the command's (echo) output; a VM runs its own init, its log is the serial console", 1},
	{`should support streaming interfaces runtime should support attach`, "attach talks to the command's shell (sh) on stdin; a VM's attach is its serial console", 1},
	{`exec with tty=true`, "the guest agent gives a command pipes, never a terminal: vmpod refuses a TTY exec (attach is the console)", 1},
	// Host mounts: a VM's guest gets a host dir as a virtio-fs share, in
	// a file server's private mount namespace.
	{`Container Mount Propagation`, "mounts made on the host after the start propagated into the container; a share is served from a file server's private mount namespace, which sees no later host mount", 3},
	{`Container Mount Readonly`, "recursive read-only bind mounts checked from a container process's mount table; not tried with shares yet", 5},
	// cAdvisor's series of a container process.
	{`PodSandbox runtime should support metrics operations`, "critest wants cAdvisor's 39 container series (file systems, blkio, file descriptors, CPU throttling...), most of them a host process's, and writes files with an exec 30 s after a start, before a TCG guest has booted; vm-runtime cri reports the series a VM pod has (docs/metrics.md; test/cri TestCrictlVMPod checks them)", 2},
	// One VM per pod.
	{`Multiple Containers`, "several containers in one pod; a VM pod has exactly one container, its VM", 3},
	{`listing stats for three created containers`, "three containers in one pod; a VM pod has exactly one", 1},
	// No NRI (critest skips these itself without --nri-socket).
	{`NRI`, "NRI plugins adjust OCI containers; vm-runtime cri serves no NRI socket", 13},
	{`portforward in host network`, "a host-network pod; a VM pod always has a network namespace of its own", 1},
	// critest's images come from a local registry, through the server's
	// --registry-mirror for their upstream registries: every name is
	// served but upstream's image by its digest, which no image of this
	// test's has.
	{`Image Manager public image with digest`, "pulls upstream's image by its digest, which no image served here has", 1},
}

// critestRegistries are the registries critest's image names name
// (cri-tools v1.37.0's pkg/validate/consts.go and pkg/framework/util.go).
var critestRegistries = []string{"registry.k8s.io", "gcr.io", "k8s.gcr.io"}

// critestImages are the paths, below their registries, of the images
// critest pulls, each served as the test guest's containerdisk with what
// upstream's busybox-based images hold that critest's image volume specs
// look for (busyboxLayer). Each distinct variant is the guest with a
// label of its own (a distinct image ID); user is the config's User for
// the image-status specs.
var critestImages = []struct{ path, variant, user string }{
	{"e2e-test-images/busybox:1.29-2", "", ""},
	{"e2e-test-images/nginx:1.14-2", "", ""},
	// Images of their own: a spec wants each one's tags to be its own.
	{"k8s-staging-cri-tools/test-image-latest:latest", "latest", ""},
	{"k8s-staging-cri-tools/test-image-tag:test", "tag-test", ""},
	{"k8s-staging-cri-tools/test-image-tag:all", "tag-all", ""},
	{"k8s-staging-cri-tools/test-image-1:latest", "1", ""},
	{"k8s-staging-cri-tools/test-image-2:latest", "2", ""},
	{"k8s-staging-cri-tools/test-image-3:latest", "3", ""},
	{"k8s-staging-cri-tools/test-image-tags:1", "tags", ""},
	{"k8s-staging-cri-tools/test-image-tags:2", "tags", ""},
	{"k8s-staging-cri-tools/test-image-tags:3", "tags", ""},
	{"k8s-staging-cri-tools/test-image-user-uid:latest", "uid", "1002"},
	{"k8s-staging-cri-tools/test-image-user-username:latest", "username", "www-data"},
	{"k8s-staging-cri-tools/test-image-user-uid-group:latest", "uid-group", "1003:users"},
	{"k8s-staging-cri-tools/test-image-user-username-group:latest", "username-group", "www-data:www-data"},
	{"k8s-staging-cri-tools/test-image-predefined-group:latest", "predefined-group", "1000:50000"},
	{"pause:3.9", "pause", ""},
}

// TestCritest runs cri-tools' critest (hack/critest/install.sh, pinned)
// against vm-runtime cri on the test's node: the server, the registry
// serving every image critest pulls (the test guest), and critest itself
// all in the node's network namespace. Every spec but critestSkips must
// pass.
func TestCritest(t *testing.T) {
	n := newNode(t)
	n.writeCNIConfig(true) // the host port spec
	critest := critestBin(t)
	host := n.serveCritestImages()
	// critest pulls its images by their upstream names; the server
	// fetches them from the test's registry (--registry-mirror), where
	// each is served at its upstream path.
	for _, upstream := range critestRegistries {
		n.serverArgs = append(n.serverArgs, "--registry-mirror", upstream+"=http://"+host)
	}
	// critest's host dirs, bind-mounted into its containers (the volume
	// specs), are made under its TMPDIR: the guest gets them as shares.
	n.serverArgs = append(n.serverArgs, "--volume-host-paths", n.dir)
	n.start()
	sock := n.serveMemoryProxy()

	report := filepath.Join(n.dir, "critest-report.json")
	args := []string{"--net=" + n.nsPath, critest,
		"-runtime-endpoint", "unix://" + sock, "-image-endpoint", "unix://" + sock,
		"-config", filepath.Join(n.dir, "crictl.yaml"),
		"-ginkgo.no-color", "-ginkgo.json-report", report, "-ginkgo.v", "-ginkgo.show-node-events=false",
	}
	// By hand: VMPOD_CRITEST_FOCUS=regexp runs those specs alone;
	// VMPOD_CRITEST_SKIPPED=1 runs the skipped ones instead, to review
	// the list (expect failures).
	flag := "-ginkgo.skip"
	review := os.Getenv("VMPOD_CRITEST_SKIPPED") != ""
	if review {
		flag = "-ginkgo.focus"
	}
	for _, s := range critestSkips {
		args = append(args, flag, s.spec)
	}
	if review { // its stream never ends: the console has no shell to exit on stdin's end
		args = append(args, "-ginkgo.skip", "should support attach")
	}
	if f := os.Getenv("VMPOD_CRITEST_FOCUS"); f != "" {
		args = append(args, "-ginkgo.focus", f)
	}
	// About 2.5 min here; the bound leaves the rest of make test's 30 min
	// per package to the crictl tests. Past it ginkgo interrupts the spec
	// under way (reported failed) and writes its report.
	suiteTimeout := 12 * time.Minute
	if review {
		suiteTimeout = 25 * time.Minute
	}
	args = append(args, "-ginkgo.timeout", suiteTimeout.String())
	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout+2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", args...)
	cmd.Dir = n.dir
	cmd.Env = append(os.Environ(), "TMPDIR="+n.dir) // its pods' log dirs go with the test's dir
	logPath := filepath.Join(n.dir, "critest.log")
	out, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	start := time.Now()
	runErr := cmd.Run()
	elapsed := time.Since(start).Round(time.Second)

	res, err := readCritestReport(report)
	if err != nil {
		t.Fatalf("critest (%v after %v) left no report: %v\n%s", runErr, elapsed, err, tail(logPath, 200))
	}
	t.Logf("critest: %d specs: %d passed, %d failed, %d skipped (%d by vmpod's list, %d by critest itself), in %v",
		res.total(), len(res.passed), len(res.failed), len(res.skippedList)+len(res.skippedSelf),
		len(res.skippedList), len(res.skippedSelf), elapsed)
	if review {
		for _, s := range res.passed {
			t.Logf("passed: %s", s)
		}
	}
	for _, s := range res.skippedSelf {
		t.Logf("skipped by critest itself: %s", s)
	}
	for _, f := range res.failed {
		t.Errorf("critest spec failed: %s", f)
	}
	if !review && os.Getenv("VMPOD_CRITEST_FOCUS") == "" {
		checkSkipCounts(t, res.skippedList)
	}
	if runErr != nil && len(res.failed) == 0 {
		t.Errorf("critest: %v, with no spec failed\n%s", runErr, tail(logPath, 100))
	}
	if t.Failed() {
		t.Logf("critest's output (the end):\n%s", tail(logPath, 400))
		return
	}
	n.stop()
	n.assertNothingLeft()
}

// checkSkipCounts: each pattern of critestSkips skipped as many specs as
// it says, and no spec was skipped by two.
func checkSkipCounts(t *testing.T, skippedSpecs []string) {
	t.Helper()
	by := map[string][]string{}
	for _, text := range skippedSpecs {
		var matched []string
		for _, s := range critestSkips {
			if regexp.MustCompile(s.spec).MatchString(text) {
				matched = append(matched, s.spec)
				by[s.spec] = append(by[s.spec], text)
			}
		}
		if len(matched) > 1 {
			t.Errorf("critest spec %q is skipped by %d patterns: %q", text, len(matched), matched)
		}
	}
	for _, s := range critestSkips {
		if got := by[s.spec]; len(got) != s.count {
			t.Errorf("skip pattern %q skipped %d specs, its count says %d:\n\t%s", s.spec, len(got), s.count, strings.Join(got, "\n\t"))
		}
	}
}

// skipped says whether critestSkips skips the spec with this text.
func skipped(text string) bool {
	for _, s := range critestSkips {
		if regexp.MustCompile(s.spec).MatchString(text) {
			return true
		}
	}
	return false
}

// critestResult is what critest's JSON report says of each spec.
type critestResult struct {
	passed, failed, skippedList, skippedSelf []string
}

func (r critestResult) total() int {
	return len(r.passed) + len(r.failed) + len(r.skippedList) + len(r.skippedSelf)
}

// readCritestReport reads ginkgo's JSON report (critest's own
// --report-dir writes nothing in cri-tools 1.37): the It specs, by
// state; a spec skipped by --ginkgo.skip (ours) apart from one that
// skipped itself (e.g. a feature the node lacks).
func readCritestReport(path string) (critestResult, error) {
	var res critestResult
	b, err := os.ReadFile(path)
	if err != nil {
		return res, err
	}
	var suites []struct {
		SpecReports []struct {
			ContainerHierarchyTexts []string
			LeafNodeText            string
			LeafNodeType            string
			State                   string
			Failure                 struct {
				Message  string
				Location struct {
					FileName   string
					LineNumber int
				}
			}
		}
	}
	if err := json.Unmarshal(b, &suites); err != nil {
		return res, err
	}
	if len(suites) != 1 {
		return res, fmt.Errorf("%d suites in the report, want 1", len(suites))
	}
	for _, s := range suites[0].SpecReports {
		if s.LeafNodeType != "It" {
			if s.State != "passed" && s.State != "skipped" {
				res.failed = append(res.failed, fmt.Sprintf("[%s] %s: %s", s.LeafNodeType, s.State, s.Failure.Message))
			}
			continue
		}
		text := strings.Join(append(s.ContainerHierarchyTexts, s.LeafNodeText), " ")
		switch {
		case s.State == "passed":
			res.passed = append(res.passed, text)
		case s.State == "skipped" && skipped(text):
			res.skippedList = append(res.skippedList, text)
		case s.State == "skipped" || s.State == "pending":
			// By critest itself (a feature the runtime says it lacks), or
			// not run at all (an interrupted suite): said with its reason.
			res.skippedSelf = append(res.skippedSelf, text+" ("+s.Failure.Message+")")
		default:
			res.failed = append(res.failed, fmt.Sprintf("%s: %s at %s:%d: %s", text, s.State,
				filepath.Base(s.Failure.Location.FileName), s.Failure.Location.LineNumber, s.Failure.Message))
		}
	}
	sort.Strings(res.failed)
	return res, nil
}

// serveCritestImages serves the test guest's containerdisk under every
// name critestImages lists, from a registry on the node namespace's
// loopback, and returns the registry's host:port (critest's
// --registry-prefix).
func (n *node) serveCritestImages() string {
	t := n.t
	img, err := testguest.OpenArchive(testguest.Archive(t), filepath.Join(n.dir, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	mt, err := img.MediaType()
	if err != nil {
		t.Fatal(err)
	}
	if img, err = mutate.AppendLayers(img, busyboxLayer(t, mt)); err != nil {
		t.Fatal(err)
	}
	host, pushHost := n.serveRegistry()
	variants := map[string]v1.Image{}
	for _, ci := range critestImages {
		key := ci.variant + "\x00" + ci.user
		im, ok := variants[key]
		if !ok {
			im = img
			if ci.variant != "" || ci.user != "" {
				cf, err := img.ConfigFile()
				if err != nil {
					t.Fatal(err)
				}
				c := cf.Config.DeepCopy()
				c.User = ci.user
				if ci.variant != "" {
					c.Labels = map[string]string{"io.vmpod.test.variant": ci.variant}
				}
				if im, err = mutate.Config(img, *c); err != nil {
					t.Fatal(err)
				}
			}
			variants[key] = im
		}
		ref, err := name.ParseReference(pushHost + "/" + ci.path)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(ref, im); err != nil {
			t.Fatalf("push %s: %v", ci.path, err)
		}
	}
	return host
}

// busyboxLayer is a layer of what critest's image volume specs read in
// an image (cri-tools v1.37.0 pkg/validate/image_volume.go), as
// upstream's busybox-based test images have it: /bin/sh and /bin/ls (the
// node's busybox-static, which runs in the test guest too: the specs
// run the image's ls in the guest, from the volume) and /etc/passwd (the
// sub path spec mounts the image's etc).
func busyboxLayer(t *testing.T, manifest types.MediaType) v1.Layer {
	t.Helper()
	bin, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("busybox-static (hack/install-deps.sh): %v", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bin))},
		{Name: "bin/sh", Typeflag: tar.TypeSymlink, Linkname: "busybox"},
		{Name: "bin/ls", Typeflag: tar.TypeSymlink, Linkname: "busybox"},
		{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(critestPasswd))},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		switch h.Name {
		case "bin/busybox":
			_, err = tw.Write(bin)
		case "etc/passwd":
			_, err = tw.Write([]byte(critestPasswd))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	var opts []tarball.LayerOption
	if manifest == types.OCIManifestSchema1 {
		opts = append(opts, tarball.WithMediaType(types.OCILayer))
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil }, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return layer
}

// critestPasswd is busybox's /etc/passwd, with the users critest's
// images name.
const critestPasswd = "root:x:0:0:root:/root:/bin/sh\nwww-data:x:33:33:www-data:/var/www:/bin/false\nnobody:x:65534:65534:nobody:/home:/bin/false\n"

// critestBin is critest in <repo>/_output/bin, built there by
// hack/critest/install.sh (make deps) when missing or not the pinned
// version.
func critestBin(t *testing.T) string {
	root := repo.Root(t)
	cmd := exec.Command(filepath.Join(root, "hack", "critest", "install.sh"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/critest/install.sh: %v\n%s", err, out)
	}
	return filepath.Join(root, "_output", "bin", "critest")
}

func (n *node) writeFile(file, content string) string {
	p := filepath.Join(n.dir, file)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		n.t.Fatal(err)
	}
	return p
}

// tail is the last lines of the file at path, with ginkgo's colour codes
// (if any) removed.
func tail(path string, lines int) string {
	b, _ := os.ReadFile(path)
	s := regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAllString(string(b), "")
	l := strings.Split(s, "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}
