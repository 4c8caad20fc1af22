package ckpt

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/containerd/errdefs"
)

// file is what a checkpoint file holds.
type file[T any] struct {
	Version int `json:"version"`
	Record  T   `json:"record"`
}

// Store is a record kept in a checkpoint file. No hypervisor or network
// call runs under its lock: an operation under way marks it busy instead
// (Begin, End).
type Store[T any] struct {
	what    string // for errors: "sandbox <id>"
	path    string
	version int

	mu   sync.Mutex
	rec  T
	busy string
}

// New is the store of rec at path, written with version; nothing is
// written until the first Update.
func New[T any](what, path string, version int, rec T) *Store[T] {
	return &Store[T]{what: what, path: path, version: version, rec: rec}
}

// Get is the record as last saved.
func (s *Store[T]) Get() T {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rec
}

// Update changes the record through f and checkpoints it; if either
// fails the record stays as it was.
func (s *Store[T]) Update(f func(*T) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := s.rec
	if err := f(&rec); err != nil {
		return err
	}
	if err := WriteAtomic(s.path, file[T]{Version: s.version, Record: rec}); err != nil {
		return fmt.Errorf("checkpoint %s: %v: %w", s.what, err, errdefs.ErrInternal)
	}
	s.rec = rec
	return nil
}

// Begin marks the record busy with op if check (nil: none) passes on it;
// a second caller is refused with FailedPrecondition, naming the first.
func (s *Store[T]) Begin(op string, check func(T) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy != "" {
		return fmt.Errorf("%s: %s is under way: %w", s.what, s.busy, errdefs.ErrFailedPrecondition)
	}
	if check != nil {
		if err := check(s.rec); err != nil {
			return err
		}
	}
	s.busy = op
	return nil
}

// End clears Begin's mark.
func (s *Store[T]) End() {
	s.mu.Lock()
	s.busy = ""
	s.mu.Unlock()
}

// Remove deletes the checkpoint file; the record stays in memory.
func (s *Store[T]) Remove() error {
	if err := RemoveFile(s.path); err != nil {
		return fmt.Errorf("checkpoint %s: %v: %w", s.what, err, errdefs.ErrInternal)
	}
	return nil
}

// WriteAtomic replaces path with the JSON of v: a temp file beside it,
// fsynced, renamed over it, and the dir fsynced.
func WriteAtomic(path string, v any) error {
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

// Write checkpoints rec at path with version, as a Store's Update does.
func Write[T any](path string, version int, rec T) error {
	return WriteAtomic(path, file[T]{Version: version, Record: rec})
}

// Read reads the record of the checkpoint at path; a file of another
// version is an error (its reader skips it rather than guess).
func Read[T any](path string, version int) (T, error) {
	var c file[T]
	b, err := os.ReadFile(path)
	if err != nil {
		return c.Record, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c.Record, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if c.Version != version {
		var zero T
		return zero, fmt.Errorf("checkpoint %s: version %d, want %d", path, c.Version, version)
	}
	return c.Record, nil
}

// ReadAll reads the record of every checkpoint (*.json) in dir; a bad one
// is reported in errs and skipped. A dir that does not exist holds none.
func ReadAll[T any](dir string, version int) (out []T, errs []error) {
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
		rec, err := Read[T](filepath.Join(dir, e.Name()), version)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, rec)
	}
	return out, errs
}

// RemoveFile removes path; one already gone is no error.
func RemoveFile(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
