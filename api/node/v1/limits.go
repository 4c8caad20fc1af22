package node

// MaxExecStdin is the most stdin one ExecRequest carries: the QEMU guest
// agent takes a command's input in one message. The daemon refuses more
// (InvalidArgument); pkg/daemon's tests hold it to pkg/vm's limit.
const MaxExecStdin = 1 << 20

// DefaultSocket is where `vm-runtime daemon` serves the node API and the
// shims look for it, unless told otherwise.
const DefaultSocket = "/run/vmpod/vmd.sock"
