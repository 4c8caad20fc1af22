package cri

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/containerd/errdefs"
)

// checkpointVersion is written into every checkpoint; a reader skips (and
// logs) one of another version rather than guess.
const checkpointVersion = 1

// checkpoint is the file a record is kept in.
type checkpoint[T any] struct {
	Version int `json:"version"`
	Record  T   `json:"record"`
}

// stored is a record kept in a checkpoint file. It changes only through
// update, which saves it first; no hypervisor or CNI call runs under its
// lock: an operation under way marks it busy instead (begin, end).
type stored[T any] struct {
	what string // for errors: "sandbox <id>"
	path string

	mu   sync.Mutex
	rec  T
	busy string
}

func newStored[T any](what, path string, rec T) *stored[T] {
	return &stored[T]{what: what, path: path, rec: rec}
}

func (s *stored[T]) get() T {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rec
}

// update changes the record through f and checkpoints it; if either
// fails the record stays as it was.
func (s *stored[T]) update(f func(*T) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := s.rec
	if err := f(&rec); err != nil {
		return err
	}
	if err := writeAtomic(s.path, checkpoint[T]{Version: checkpointVersion, Record: rec}); err != nil {
		return errorf(errdefs.ErrInternal, "checkpoint %s: %v", s.what, err)
	}
	s.rec = rec
	return nil
}

// begin marks the record busy with op if check (nil: none) passes on it;
// a second caller is refused with FailedPrecondition.
func (s *stored[T]) begin(op string, check func(T) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy != "" {
		return errorf(errdefs.ErrFailedPrecondition, "%s: %s is under way", s.what, s.busy)
	}
	if check != nil {
		if err := check(s.rec); err != nil {
			return err
		}
	}
	s.busy = op
	return nil
}

func (s *stored[T]) end() {
	s.mu.Lock()
	s.busy = ""
	s.mu.Unlock()
}

// remove deletes the checkpoint file.
func (s *stored[T]) remove() error {
	if err := removeFile(s.path); err != nil {
		return errorf(errdefs.ErrInternal, "checkpoint %s: %v", s.what, err)
	}
	return nil
}

// writeAtomic replaces path with the JSON of v: a temp file beside it,
// fsynced, renamed over it, and the dir fsynced, so a crash leaves the old
// checkpoint or the new one, never a torn one.
func writeAtomic(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(path)+"-")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// readCheckpoints reads the record of every checkpoint in dir; a bad one
// is reported in errs and skipped.
func readCheckpoints[T any](dir string) (out []T, errs []error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, []error{err}
	}
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) != ".json" {
			continue
		}
		p := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var c checkpoint[T]
		if err := json.Unmarshal(b, &c); err != nil {
			errs = append(errs, fmt.Errorf("checkpoint %s: %w", p, err))
			continue
		}
		if c.Version != checkpointVersion {
			errs = append(errs, fmt.Errorf("checkpoint %s: version %d, want %d", p, c.Version, checkpointVersion))
			continue
		}
		out = append(out, c.Record)
	}
	return out, errs
}

func removeFile(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
