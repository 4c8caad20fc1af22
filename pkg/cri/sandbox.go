package cri

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/vmpod/vmpod/internal/ckpt"
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
	*ckpt.Store[sandboxRecord]
}

func newSandbox(c Config, rec sandboxRecord) *sandbox {
	return &sandbox{ckpt.New("sandbox "+rec.ID, c.sandboxPath(rec.ID), checkpointVersion, rec)}
}

// sandboxName is the name the kubelet reserves per sandbox, as containerd
// makes it.
func sandboxName(r sandboxRecord) string {
	return strings.Join([]string{r.Name, r.Namespace, r.UID, fmt.Sprint(r.Attempt)}, "_")
}

// layout is where the pod's VM keeps its files (the VM service's), with
// the pod's resolv.conf.
func (s *Server) layout(id string) vm.Layout { return s.vms.Layout(id) }

// resolvConf is the pod's resolv.conf, which the guest's DHCP answer is
// made from.
func (s *Server) resolvConf(id string) string { return filepath.Join(s.layout(id).Dir, "resolv.conf") }

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
