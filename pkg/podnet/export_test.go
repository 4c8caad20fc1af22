package podnet

// Abandon leaves a as a process that dies does: its DHCP server stops,
// the tap and the filters stay on the node. a must not be closed after.
func (a *Attachment) Abandon() error { return a.dhcp.close() }
