// Package ckpt keeps records in checkpoint files: one JSON file per
// record, versioned, replaced atomically (a temp file beside it, fsynced,
// renamed over it, the dir fsynced), so a crash leaves the old record or
// the new one, never a torn one. A Store changes its record only through
// Update, which saves first; an operation that must not run twice at once
// marks the record busy (Begin, End) instead of holding a lock across it.
//
// Every vmpod process that outlives a crash with state on disk (the node
// daemon, the CRI server, the shim's tasks) keeps it through here.
//
// It may import containerd's errdefs and the standard library.
package ckpt
