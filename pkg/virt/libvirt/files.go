package libvirt

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
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

// libvirt's loadable modules that the embedded QEMU driver uses: the
// driver itself, loaded at open, and the storage-file backend for local
// files (Debian's libvirt-daemon), loaded at the first domain start and
// needed by snapshots and restores. LIBVIRT_DRIVER_DIR and
// LIBVIRT_STORAGE_FILE_DIR move them, as they move them for libvirt.
const (
	qemuModule        = "libvirt_driver_qemu.so"
	storageFileModule = "libvirt_storage_file_fs.so"
)

// modulePaths are the paths of the QEMU driver and storage-file modules
// of the libvirt this process links, found next to libvirt.so in
// /proc/self/maps; "" where unknown.
func modulePaths() (qemu, storage string) {
	lib := linkedLibvirtDir()
	qemuDir, storageDir := os.Getenv("LIBVIRT_DRIVER_DIR"), os.Getenv("LIBVIRT_STORAGE_FILE_DIR")
	if qemuDir == "" && lib != "" {
		qemuDir = filepath.Join(lib, "libvirt", "connection-driver")
	}
	if storageDir == "" && lib != "" {
		storageDir = filepath.Join(lib, "libvirt", "storage-file")
	}
	if qemuDir != "" {
		qemu = filepath.Join(qemuDir, qemuModule)
	}
	if storageDir != "" {
		storage = filepath.Join(storageDir, storageFileModule)
	}
	return qemu, storage
}

// linkedLibvirtDir is the dir of the libvirt.so.0 mapped into this process.
func linkedLibvirtDir() string {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return ""
	}
	for _, line := range bytes.Split(maps, []byte("\n")) {
		f := bytes.Fields(line)
		if len(f) < 6 {
			continue
		}
		if p := string(f[len(f)-1]); strings.HasPrefix(filepath.Base(p), "libvirt.so.0") {
			return filepath.Dir(p)
		}
	}
	return ""
}

// alignModuleTimes keeps libvirt's idea of its own age steady for the life
// of a process. libvirt takes the newest ctime among the modules it loaded
// as its own, and finds its QEMU capabilities cache stale whenever that
// value differs from the one an entry was probed with: it then probes QEMU
// again, for seconds, in the process that asked, and writes back the flag
// maskCaps takes out (every later start in that process pays ~400
// qom-gets). The QEMU module is loaded at open, the storage-file module at
// the first domain start; when the storage module is the newer (libvirt-
// daemon installed or upgraded after libvirt-daemon-driver-qemu), that
// first start would make the cache stale mid-process. So the QEMU module's
// ctime is moved to now, its content and times left as they are, and libvirt's
// age is the QEMU module's before and after the storage module loads.
// Needs root; it does nothing when the storage module is not the newer
// or either is missing, and a failure only costs a probe.
func alignModuleTimes() {
	qemu, storage := modulePaths()
	if qemu == "" || storage == "" {
		return
	}
	var q, s unix.Stat_t
	if unix.Stat(qemu, &q) != nil || unix.Stat(storage, &s) != nil {
		return
	}
	if s.Ctim.Sec <= q.Ctim.Sec { // libvirt keeps seconds
		return
	}
	ts := []unix.Timespec{q.Atim, q.Mtim}
	_ = unix.UtimesNano(qemu, ts)
}

// moduleCtime is the ctime of libvirt's QEMU module in the form libvirt
// records it in a capabilities cache entry (<selfctime>, seconds), 0 when
// unknown.
func moduleCtime() int64 {
	qemu, _ := modulePaths()
	var st unix.Stat_t
	if qemu == "" || unix.Stat(qemu, &st) != nil {
		return 0
	}
	return st.Ctim.Sec
}

// selfCtimeRE finds what a capabilities cache entry says libvirt's age was
// when it was probed.
var selfCtimeRE = regexp.MustCompile(`<selfctime>([0-9]+)</selfctime>`)

// staleEntry says the capabilities cache entry data was probed by another
// build of libvirt's QEMU module than the one this process will load
// (libvirt's age, moduleCtime, differs), so libvirt will probe again.
func staleEntry(data []byte) bool {
	now := moduleCtime()
	m := selfCtimeRE.FindSubmatch(data)
	if now == 0 || m == nil {
		return false // libvirt decides
	}
	was, err := strconv.ParseInt(string(m[1]), 10, 64)
	return err == nil && was != now
}
