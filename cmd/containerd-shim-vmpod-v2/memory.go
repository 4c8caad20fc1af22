package main

import (
	"os"
	"strconv"
	"time"

	"github.com/vmpod/vmpod/pkg/virt/libvirt"
)

// What a shim weighs is paid once per VM pod on the node, for the pod's
// whole life. Measured with BenchmarkShimFootprint (test/containerd), most
// of the private memory was glibc malloc arenas that libvirt's threads
// filled while probing capabilities and starting the domain, and then
// freed, but which glibc keeps.
const (
	// mallocArenas caps glibc's arenas (MALLOC_ARENA_MAX): libvirt's
	// threads share one instead of taking one each.
	mallocArenas = 1
	// trimEvery is how often the free pages of the malloc arenas go back
	// to the kernel (malloc_trim(0), a few microseconds for a shim's heap).
	trimEvery = 10 * time.Second
)

// Environment overrides, for measuring each knob (0 turns one off).
const (
	arenasEnv = "VMPOD_SHIM_MALLOC_ARENAS"
	trimEnv   = "VMPOD_SHIM_MALLOC_TRIM_SECONDS"
)

func tuneMemory() {
	arenas := envInt(arenasEnv, mallocArenas)
	if arenas > 0 && os.Getenv("MALLOC_ARENA_MAX") == "" {
		// glibc fixes its arena limit when a second thread first
		// allocates, before main here (mallopt now was measured to leave
		// 1.9 MiB in extra arenas): the environment of the long-lived shim,
		// which the start command execs from this one, sets it in time.
		os.Setenv("MALLOC_ARENA_MAX", strconv.Itoa(arenas))
		// For this process, whatever it still can.
		_ = libvirt.LimitMallocArenas(arenas)
	}
	if every := time.Duration(envInt(trimEnv, int(trimEvery/time.Second))) * time.Second; every > 0 {
		go func() {
			for range time.Tick(every) {
				libvirt.TrimMalloc()
			}
		}()
	}
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n >= 0 {
		return n
	}
	return def
}
