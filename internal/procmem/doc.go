// Package procmem reads what a process weighs from /proc/<pid>/smaps and
// sorts its mappings into the kinds that tell where a vmpod shim's memory
// goes: its own binary, shared libraries, the Go heap, glibc's malloc
// (the brk heap and the per-thread arenas libvirt's threads make), thread
// stacks, and the rest of the anonymous memory (Go runtime metadata, cgo
// allocations through mmap).
//
// The kinds are told apart by shape, not by asking the process:
//   - Go heap: anonymous mappings between 4 GiB and 0x7e0000000000. Go
//     reserves its arenas there (0xc000000000 up, or a random base since
//     Go 1.26's randomized heap base), while glibc, the kernel and Go's
//     own off-heap metadata map top-down from just below the stack
//     (0x7fxxxxxxxxxx). The Go heap holds goroutine stacks too;
//   - malloc arena: an anonymous read-write mapping that starts on a
//     64 MiB boundary (glibc's HEAP_MAX_SIZE) followed by its PROT_NONE
//     reservation; the main arena is [heap];
//   - thread stack: a read-write anonymous mapping directly above a
//     one-page PROT_NONE guard (glibc's pthread stacks, which is what Go
//     threads get too when cgo is linked).
//
// Imports: the standard library only.
package procmem
