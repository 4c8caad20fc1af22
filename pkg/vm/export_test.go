package vm

// Abandon drops v as a process that dies does: its console connection
// closes and its Runtime forgets its Machine, while the domain, QEMU's
// cgroup and the record stay for Adopt. (A VM with a network would lose
// its DHCP server too; the tests that abandon have none.)
func (v *VM) Abandon() {
	m := v.machine
	if m == nil {
		return
	}
	m.mu.Lock()
	c := m.console
	m.console = nil
	m.mu.Unlock()
	if c != nil {
		c.close()
		<-c.done
	}
	m.rt.remove(m)
	v.machine = nil
}
