package memdebug

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"time"

	"github.com/vmpod/vmpod/pkg/virt/libvirt"
)

// Env names the directory to dump into.
const Env = "VMPOD_DEBUG_MEMDIR"

// TrimEnv, when set to 1, makes the dumper call malloc_trim(0) before each
// dump (an experiment: how much of the malloc arenas is free memory glibc
// keeps).
const TrimEnv = "VMPOD_DEBUG_MALLOC_TRIM"

// TrimMalloc gives the free pages of every malloc arena back to the
// kernel (malloc_trim(0)).
func TrimMalloc() { libvirt.TrimMalloc() }

// Start begins the dumps if Env is set, and the trims if TrimEnv is.
func Start() {
	dir := os.Getenv(Env)
	trim := os.Getenv(TrimEnv) == "1"
	if dir == "" && !trim {
		return
	}
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			dir = ""
		}
	}
	go func() {
		for {
			time.Sleep(10 * time.Second)
			if trim {
				TrimMalloc()
			}
			if dir != "" {
				Dump(dir)
			}
		}
	}()
}

// Dump writes the three files once.
func Dump(dir string) {
	base := filepath.Join(dir, strconv.Itoa(os.Getpid()))
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	ms.PauseNs, ms.PauseEnd = [256]uint64{}, [256]uint64{}
	if b, err := json.MarshalIndent(struct {
		runtime.MemStats
		Goroutines int
		GOMAXPROCS int
	}{ms, runtime.NumGoroutine(), runtime.GOMAXPROCS(0)}, "", " "); err == nil {
		_ = os.WriteFile(base+".memstats", b, 0o644)
	}
	if f, err := os.Create(base + ".heap.pprof"); err == nil {
		_ = pprof.Lookup("heap").WriteTo(f, 0)
		f.Close()
	}
	_ = libvirt.WriteMallocInfo(base + ".malloc.xml")
}
