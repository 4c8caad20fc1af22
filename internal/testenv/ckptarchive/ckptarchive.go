// Package ckptarchive checks a VM pod's checkpoint archive, as the
// kubelet's checkpoint API has a runtime write it, and makes what the
// tests of both front doors need around one: signing keys, a damaged
// copy.
//
// It may import pkg/vm (the checkpoint's file names and manifest) and the
// standard library.
package ckptarchive

import (
	"archive/tar"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/vmpod/vmpod/pkg/vm"
)

// CounterScript, run in a guest (sh -c), starts a counter that counts
// every 100 ms into /run/counter and returns: after a restore it goes on
// from where the checkpoint left it, after a boot it starts over. Each
// count is written beside the file and renamed over it, so that a reader
// never finds it empty, not even in a guest paused or snapshotted between
// the shell's truncate and its write.
const CounterScript = `setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /run/counter.new; mv /run/counter.new /run/counter; sleep 0.1; done' </dev/null >/dev/null 2>&1 &`

// Check reads the archive at path and fails t unless it holds a VM's
// checkpoint in the layout containerd and CRI-O write (checkpointctl's):
// the state files under checkpoint/, each with the size and SHA-256 its
// manifest gives, and config.dump and status.dump beside them. It
// returns the manifest.
func Check(t testing.TB, path string) vm.Manifest {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sums := map[string]vm.FileSum{}
	var manifest []byte
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("archive %s: %v", path, err)
		}
		name := strings.TrimPrefix(h.Name, "./")
		if h.Typeflag != tar.TypeReg {
			continue
		}
		sum := sha256.New()
		var buf strings.Builder
		w := io.Writer(sum)
		if name == "checkpoint/"+vm.CheckpointManifest {
			w = io.MultiWriter(sum, &buf)
		}
		n, err := io.Copy(w, tr)
		if err != nil {
			t.Fatalf("archive %s: %s: %v", path, name, err)
		}
		sums[name] = vm.FileSum{Bytes: n, SHA256: hex.EncodeToString(sum.Sum(nil))}
		if buf.Len() > 0 {
			manifest = []byte(buf.String())
		}
	}
	var names []string
	for n := range sums {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, want := range []string{"checkpoint/" + vm.CheckpointState, "checkpoint/" + vm.CheckpointManifest, "config.dump", "status.dump"} {
		if _, ok := sums[want]; !ok {
			t.Errorf("archive %s lacks %s (it has %v)", path, want, names)
		}
	}
	var m vm.Manifest
	if err := json.Unmarshal(manifest, &m); err != nil {
		t.Fatalf("archive %s: manifest: %v", path, err)
	}
	for name, want := range m.Files {
		if got := sums["checkpoint/"+name]; got != want {
			t.Errorf("archive %s: checkpoint/%s is %+v, its manifest says %+v", path, name, got, want)
		}
	}
	return m
}

// Without copies the tar archive without its entry name, into a temp
// dir of t, and returns the copy.
func Without(t testing.TB, archive, name string) string {
	t.Helper()
	in, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	outPath := filepath.Join(t.TempDir(), filepath.Base(archive))
	out, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	tr, tw := tar.NewReader(in), tar.NewWriter(out)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimPrefix(h.Name, "./") == name {
			continue
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(tw, tr); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return outPath
}

// SigningKeys writes a new ed25519 key pair into dir, as a node's
// --state-signing-key and --state-trust-keys take them, and returns the
// two files.
func SigningKeys(t testing.TB, dir string) (key, trust string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	privDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	key, trust = filepath.Join(dir, "state.key"), filepath.Join(dir, "state.pub")
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(trust, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644); err != nil {
		t.Fatal(err)
	}
	return key, trust
}

// WaitGuestIP waits, up to two minutes from start, until the restored
// guest holds ip (the new pod's), as readIP (a `cat /run/ip` in the guest,
// the test guest's address with its prefix length) says, and fails t
// otherwise, naming was (the checkpointed pod's IP). It returns how long
// after start the guest had it.
func WaitGuestIP(t testing.TB, start time.Time, ip, was string, readIP func() (string, error)) time.Duration {
	t.Helper()
	if ip == was {
		t.Fatalf("the new pod has the first pod's IP %s: the test cannot tell a new lease from the old one", ip)
	}
	for {
		got, err := readIP()
		if err == nil && strings.HasPrefix(strings.TrimSpace(got), ip+"/") {
			return time.Since(start)
		}
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("the restored guest has the address %q (%v), want the new pod's %s (the first pod's was %s)", got, err, ip, was)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
