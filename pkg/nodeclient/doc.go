// Package nodeclient is a shim's side of the node API (api/node/v1): a
// client of vm-runtime daemon that outlives the daemon's restarts. It
// dials on first use and again after the connection broke; a call made
// while the daemon is away fails with Unavailable (retryable: the task
// API's caller tries again), except the calls that are safe to repeat and
// that a shim keeps open for a VM's whole life, which wait for the daemon
// to come back: Wait, and Console, which resumes the console where it
// was (and says so in the output when the new daemon no longer has what
// the old one had not yet sent).
//
// It may import api/node/v1, ttrpc, protobuf's Any, containerd's errdefs
// and the standard library; no cgo: the shim links it.
package nodeclient
