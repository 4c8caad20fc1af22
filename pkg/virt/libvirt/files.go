package libvirt

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// copyCaps copies libvirt's QEMU capabilities files (*.xml) from src to
// dst. Files dst lacks are always copied. With refresh, files whose content
// differs are copied too: when libvirt re-probes (QEMU or libvirt was
// upgraded) the shared cache must follow, or every new root would pay the
// cold probe again. Without refresh an existing file is left alone, since
// libvirt validates what it finds (emulator and libvirt ctimes, host CPU,
// kernel) and re-probes if it is stale.
//
// A missing src is an empty cache, not an error.
func copyCaps(src, dst string, refresh bool) error {
	entries, err := os.ReadDir(src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || filepath.Ext(e.Name()) != ".xml" {
			continue
		}
		want, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		have, err := os.ReadFile(filepath.Join(dst, e.Name()))
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return err
		case !refresh || bytes.Equal(have, want):
			continue
		}
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
		if err := writeFileAtomic(filepath.Join(dst, e.Name()), want, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// writeFileAtomic writes data to path so that readers (libvirt, other
// shims sharing a cache dir) see the old file or the whole new one, never a
// part: a temp file in the same dir, fsync, rename.
func writeFileAtomic(path string, data []byte, perm os.FileMode) (retErr error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
