package libvirt

/*
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>

static int vmpod_malloc_info(const char *path) {
	FILE *f = fopen(path, "w");
	if (f == NULL) return -1;
	int rc = malloc_info(0, f);
	fclose(f);
	return rc;
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// libvirt allocates with glibc's malloc from many threads (the event loop,
// the QEMU driver's workers, one per monitor and agent). glibc gives each
// thread that contends an arena of its own, up to 8 per CPU, and keeps
// what libvirt frees there: measured in a shim with one running VM (test
// guest, libvirt 9.0, glibc 2.36), 12 arenas held 12 MiB of which 10.5 MiB
// was free (the capabilities parse and the domain start allocate a lot and
// free almost all of it). vm-runtime's helper runs with MALLOC_ARENA_MAX=1
// (pkg/shim); these look at and hand back what is left, for memdebug.

// TrimMalloc returns the free pages of every malloc arena to the kernel
// (malloc_trim(0)); it reports whether any memory was released. It walks
// every arena under its lock: cheap for a shim's few MiB, not for a hot
// path.
func TrimMalloc() bool { return C.malloc_trim(0) == 1 }

// WriteMallocInfo writes glibc's malloc_info XML (each arena's size and
// free chunks) to path.
func WriteMallocInfo(path string) error {
	p := C.CString(path)
	defer C.free(unsafe.Pointer(p))
	if C.vmpod_malloc_info(p) != 0 {
		return fmt.Errorf("malloc_info to %s failed", path)
	}
	return nil
}
