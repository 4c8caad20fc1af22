package cri

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// checkpointVersion is written into every checkpoint; a reader skips (and
// logs) one of another version rather than guess.
const checkpointVersion = 1

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

// readCheckpoints reads every checkpoint in dir into a new T each; a bad
// one is reported in errs and skipped.
func readCheckpoints[T any](dir string, version func(*T) int) (out []*T, errs []error) {
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
		v := new(T)
		if err := json.Unmarshal(b, v); err != nil {
			errs = append(errs, fmt.Errorf("checkpoint %s: %w", p, err))
			continue
		}
		if got := version(v); got != checkpointVersion {
			errs = append(errs, fmt.Errorf("checkpoint %s: version %d, want %d", p, got, checkpointVersion))
			continue
		}
		out = append(out, v)
	}
	return out, errs
}

func removeFile(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
