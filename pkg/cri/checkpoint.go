package cri

// checkpointVersion is the version of the server's sandbox and image
// checkpoints (internal/ckpt); a reader skips (and logs) one of another
// version rather than guess. Containers have their own
// (containerCheckpointVersion).
const checkpointVersion = 1
