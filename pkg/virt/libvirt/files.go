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

// maskedCapsFlag is the one capability vmpod takes out of libvirt's
// capabilities cache. With it, libvirt 9.0 reads a started guest's CPU
// back one QOM property at a time (qemuProcessFetchGuestCPU: a qom-list
// and about 400 qom-gets over QMP, 0.2-1 s of every start on a 2-core TCG
// machine, BenchmarkStartPhases), only to check and record CPU features
// vmpod's domains never ask for (no CPU model on TCG; host-passthrough,
// check=none on KVM). Without it libvirt takes its x86 path: two qom-gets
// (feature-words, filtered-features). The flag's other use, refusing
// MSR-based features in a domain's CPU at its start, applies to CPU
// definitions vmpod never writes (pkg/convert's cpu step).
const maskedCapsFlag = "<flag name='cpu-unavailable-features'/>"

// maskCaps takes maskedCapsFlag out of every capabilities cache entry in
// dir (libvirt's own, below an embed root) and says whether it changed
// one. libvirt checks an entry against QEMU's and its own binaries, not
// its content, so a masked entry stays valid until one of them changes;
// the probe libvirt then runs writes the flag back, and the next open
// masks it again.
func maskCaps(dir string) (bool, error) {
	entries, err := filepath.Glob(filepath.Join(dir, "*.xml"))
	if err != nil {
		return false, err
	}
	changed := false
	for _, e := range entries {
		data, err := os.ReadFile(e)
		if err != nil {
			return changed, err
		}
		var kept [][]byte
		lines := bytes.SplitAfter(data, []byte("\n"))
		for _, l := range lines {
			if !bytes.Equal(bytes.TrimSpace(l), []byte(maskedCapsFlag)) {
				kept = append(kept, l)
			}
		}
		if len(kept) == len(lines) {
			continue
		}
		if err := writeFileAtomic(e, bytes.Join(kept, nil), 0o600); err != nil {
			return changed, err
		}
		changed = true
	}
	return changed, nil
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
