package ckpt

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

type rec struct {
	N int    `json:"n"`
	S string `json:"s,omitempty"`
}

// TestStore: Update saves before it changes the record, a failed f
// changes nothing, Begin refuses a second operation naming the first,
// and what was saved reads back.
func TestStore(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.json")
	s := New("thing a", path, 3, rec{N: 1})
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("New wrote %s: %v", path, err)
	}
	if err := s.Update(func(r *rec) error { r.N = 2; return nil }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := s.Update(func(r *rec) error { r.N = 99; return boom }); !errors.Is(err, boom) {
		t.Fatalf("Update with a failing f: %v", err)
	}
	if got := s.Get(); got.N != 2 {
		t.Errorf("after a failed Update: %+v, want N 2", got)
	}
	got, err := Read[rec](path, 3)
	if err != nil || got.N != 2 {
		t.Errorf("Read: %+v, %v; want N 2", got, err)
	}
	if err := s.Begin("start", nil); err != nil {
		t.Fatal(err)
	}
	err = s.Begin("stop", nil)
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "start is under way") {
		t.Errorf("a second Begin: %v, want FailedPrecondition naming start", err)
	}
	s.End()
	if err := s.Begin("stop", func(r rec) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("Begin with a failing check: %v", err)
	}
	if err := s.Begin("stop", nil); err != nil {
		t.Errorf("Begin after a failed check: %v", err)
	}
	if err := s.Remove(); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(); err != nil {
		t.Errorf("Remove twice: %v", err)
	}
}

// TestReadAll: good records come back; another version, torn JSON, temp
// files and other names are skipped, the bad ones reported.
func TestReadAll(t *testing.T) {
	dir := t.TempDir()
	for name, v := range map[string]int{"a.json": 1, "b.json": 1, "old.json": 0} {
		if err := Write(filepath.Join(dir, name), v, rec{N: len(name)}); err != nil {
			t.Fatal(err)
		}
	}
	for name, data := range map[string]string{"torn.json": `{"version":1,"rec`, ".tmp-a.json-123": `x`, "notes.txt": `x`} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, errs := ReadAll[rec](dir, 1)
	if len(got) != 2 {
		t.Errorf("ReadAll: %+v, want the two records of version 1", got)
	}
	if len(errs) != 2 {
		t.Errorf("ReadAll errors: %v, want one for old.json (version 0) and one for torn.json", errs)
	}
	if got, errs := ReadAll[rec](filepath.Join(dir, "none"), 1); got != nil || errs != nil {
		t.Errorf("ReadAll of a missing dir: %v, %v; want nothing", got, errs)
	}
}
