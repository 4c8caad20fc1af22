// Package memdebug dumps what a vmpod process holds in memory, for
// measuring it (test/containerd's BenchmarkShimFootprint): when the
// environment variable VMPOD_DEBUG_MEMDIR names a directory, Start writes
// into it, every 10 seconds, <pid>.memstats (runtime.MemStats as JSON),
// <pid>.heap.pprof (the Go heap profile) and <pid>.malloc.xml (glibc's
// malloc_info: each malloc arena's size, what libvirt allocates with).
// Without the variable it does nothing.
//
// Imports: pkg/virt/libvirt (glibc's malloc, through its cgo) and the
// standard library.
package memdebug
