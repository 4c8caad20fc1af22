package cri

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vmpod/vmpod/pkg/vm"
)

// RunPodSandbox makes the pod: its dir, its network namespace and its
// place on the pod network (CNI). Each acquisition is checkpointed before
// it is made and undone if a later one fails.
func (s *Server) RunPodSandbox(ctx context.Context, r *runtimeapi.RunPodSandboxRequest) (_ *runtimeapi.RunPodSandboxResponse, retErr error) {
	defer func() { retErr = vm.StorageError(retErr, s.cfg.StateRoot) }() // runs last: after the undo
	cfg := r.GetConfig()
	md := cfg.GetMetadata()
	if md.GetName() == "" || md.GetNamespace() == "" || md.GetUid() == "" {
		return nil, errorf(errdefs.ErrInvalidArgument, "sandbox metadata needs a name, a namespace and a uid")
	}
	if cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE {
		return nil, errorf(errdefs.ErrInvalidArgument, "hostNetwork: a VM pod needs a network namespace of its own")
	}
	id := newID()
	rec := sandboxRecord{
		ID: id, Name: md.GetName(), Namespace: md.GetNamespace(), UID: md.GetUid(), Attempt: md.GetAttempt(),
		Labels: cfg.GetLabels(), Annotations: cfg.GetAnnotations(), RuntimeHandler: r.GetRuntimeHandler(),
		Hostname: cfg.GetHostname(), LogDir: cfg.GetLogDirectory(), CgroupParent: cfg.GetLinux().GetCgroupParent(),
		CreatedAt: time.Now().UnixNano(), State: sandboxNotReady, PortMappings: portMappings(cfg.GetPortMappings()),
	}
	name := sandboxName(rec)
	if err := s.reserve(name, id); err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			s.release(name, id)
		}
	}()

	sb := newSandbox(s.cfg, rec)
	// The record first: whatever follows is named in it for the undo.
	rec.Netns = filepath.Join(s.cfg.NetnsDir, id[:podDirIDLen])
	if err := sb.Update(func(r *sandboxRecord) error { *r = rec; return nil }); err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			if err := s.teardownSandbox(context.WithoutCancel(ctx), sb); err != nil {
				log.G(ctx).WithError(err).Warnf("undo sandbox %s", id)
			} else {
				sb.Remove()
			}
		}
	}()
	if err := os.MkdirAll(s.layout(id).Dir, 0o700); err != nil {
		return nil, errorf(errdefs.ErrInternal, "pod dir: %v", err)
	}
	if err := writeResolvConf(s.resolvConf(id), cfg.GetDnsConfig()); err != nil {
		return nil, errorf(errdefs.ErrInternal, "resolv.conf: %v", err)
	}
	if err := newNetns(rec.Netns); err != nil {
		return nil, errorf(errdefs.ErrInternal, "%v", err)
	}
	ips, err := s.net.setUp(ctx, id, rec.Netns, md, rec.PortMappings)
	if err != nil {
		return nil, err
	}
	if err := sb.Update(func(r *sandboxRecord) error { r.IPs, r.State = ips, sandboxReady; return nil }); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.sandboxes[id] = sb
	s.mu.Unlock()
	log.G(ctx).Infof("sandbox %s (%s/%s) ready at %v", id, rec.Namespace, rec.Name, ips)
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: id}, nil
}

// podDirIDLen is how much of an id names the pod's netns (as its dir,
// vm.PodLayout).
const podDirIDLen = 16

// newID is a random 256-bit id in hex, as containerd's.
func newID() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

// writeResolvConf writes the pod's DNS config as a resolv.conf; none
// writes an empty file (the guest then gets no DNS by DHCP).
func writeResolvConf(path string, dns *runtimeapi.DNSConfig) error {
	var b strings.Builder
	for _, s := range dns.GetServers() {
		b.WriteString("nameserver " + s + "\n")
	}
	if len(dns.GetSearches()) > 0 {
		b.WriteString("search " + strings.Join(dns.GetSearches(), " ") + "\n")
	}
	if len(dns.GetOptions()) > 0 {
		b.WriteString("options " + strings.Join(dns.GetOptions(), " ") + "\n")
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
