// Package ckptarchive checks a VM pod's checkpoint archive, as the
// kubelet's checkpoint API has a runtime write it, for the tests of both
// front doors.
//
// It may import pkg/vm (the checkpoint's file names and manifest) and the
// standard library.
package ckptarchive

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/vmpod/vmpod/pkg/vm"
)

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
