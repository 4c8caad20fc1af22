package cri

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/vmpod/vmpod/pkg/jail"
	"github.com/vmpod/vmpod/pkg/vm"
)

// sandboxState is a pod sandbox's CRI state:
//
//	RunPodSandbox ──► ready ──StopPodSandbox──► notready ──RemovePodSandbox──► (gone)
//
// Stop takes the pod's VM down and its network away; Remove (which stops
// first) deletes its dir and checkpoint.
type sandboxState string

const (
	sandboxReady    sandboxState = "ready"
	sandboxNotReady sandboxState = "notready"
)

// sandboxRecord is what a sandbox is, as checkpointed.
type sandboxRecord struct {
	ID             string            `json:"id"`
	Name           string            `json:"name"`
	Namespace      string            `json:"namespace"`
	UID            string            `json:"uid"`
	Attempt        uint32            `json:"attempt"`
	Labels         map[string]string `json:"labels,omitempty"`
	Annotations    map[string]string `json:"annotations,omitempty"`
	RuntimeHandler string            `json:"runtimeHandler,omitempty"`
	Hostname       string            `json:"hostname,omitempty"`
	LogDir         string            `json:"logDir,omitempty"`
	CgroupParent   string            `json:"cgroupParent,omitempty"`
	CreatedAt      int64             `json:"createdAt"`
	State          sandboxState      `json:"state"`
	// Netns is the pod's network namespace while it is set up; IPs what
	// CNI gave it.
	Netns string   `json:"netns,omitempty"`
	IPs   []string `json:"ips,omitempty"`
	// PortMappings are the pod's host ports, for CNI's ADD and the DEL
	// that must name them again.
	PortMappings []portMapping `json:"portMappings,omitempty"`
}

// sandbox is one pod, its record checkpointed.
type sandbox struct {
	*stored[sandboxRecord]
}

func newSandbox(c Config, rec sandboxRecord) *sandbox {
	return &sandbox{newStored("sandbox "+rec.ID, c.sandboxPath(rec.ID), rec)}
}

// sandboxName is the name the kubelet reserves per sandbox, as containerd
// makes it.
func sandboxName(r sandboxRecord) string {
	return strings.Join([]string{r.Name, r.Namespace, r.UID, fmt.Sprint(r.Attempt)}, "_")
}

// layout is where the pod's VM keeps its files.
func (s *Server) layout(id string) vm.Layout { return vm.PodLayout(s.cfg.StateRoot, id) }

// resolvConf is the pod's resolv.conf, which the guest's DHCP answer is
// made from.
func (s *Server) resolvConf(id string) string { return filepath.Join(s.layout(id).Dir, "resolv.conf") }

// jail leases the pod's QEMU uid (again: a lease is per pod dir) with the
// node's libvirt root, whose secret dir QEMU is shown.
func (s *Server) jail(id string) (vm.Jail, error) {
	j, err := vm.LeaseJail(s.cfg.StateRoot, s.cfg.UIDs, s.layout(id), s.cfg.DiskCap)
	if err != nil {
		return vm.Jail{}, err
	}
	j.LibvirtRoot = s.cfg.libvirtRoot()
	return j, nil
}

// linkJailer links the jailer under the state root before libvirt opens,
// so libvirt probes the emulator the domains name.
func linkJailer(stateRoot string) (string, error) {
	link, err := jail.LinkEmulator(filepath.Dir(vm.JailerLink(stateRoot)))
	if err != nil {
		return "", errorf(errdefs.ErrInternal, "QEMU's jailer: %v", err)
	}
	return link, nil
}

// removePodDir deletes the pod's dir and gives back its QEMU uid.
func (s *Server) removePodDir(id string) error {
	l := s.layout(id)
	if err := os.RemoveAll(l.Dir); err != nil {
		return errorf(errdefs.ErrInternal, "pod dir: %v", err)
	}
	if err := vm.ReleaseJail(s.cfg.StateRoot, l); err != nil {
		return errorf(errdefs.ErrInternal, "QEMU's uid lease: %v", err)
	}
	return nil
}

// sandbox finds a sandbox by id or unique id prefix.
func (s *Server) sandbox(id string) (*sandbox, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.sandboxes[id]; sb != nil {
		return sb, nil
	}
	var found *sandbox
	for k, sb := range s.sandboxes {
		if id != "" && strings.HasPrefix(k, id) {
			if found != nil {
				return nil, errorf(errdefs.ErrInvalidArgument, "sandbox id prefix %q is ambiguous", id)
			}
			found = sb
		}
	}
	if found == nil {
		return nil, notFound("sandbox", id)
	}
	return found, nil
}

// reserve takes name for id, or says which id has it.
func (s *Server) reserve(name, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if other, ok := s.names[name]; ok && other != id {
		return errorf(errdefs.ErrAlreadyExists, "name %q is reserved for %s", name, other)
	}
	s.names[name] = id
	return nil
}

func (s *Server) release(name, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.names[name] == id {
		delete(s.names, name)
	}
}
