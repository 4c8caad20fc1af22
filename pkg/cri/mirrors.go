package cri

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/name"
)

// Mirrors maps a registry host, as image names give it (registry.k8s.io,
// docker.io, 127.0.0.1:5000), to the registry that serves its images
// instead: an air-gapped node's own registry, or a pull-through cache.
// An image of a mirrored registry keeps its name (the kubelet, ImageStatus
// and ListImages know it by that name) and is fetched from the mirror
// alone, at the same repository path; nothing is sent to the registry it
// names. The pull's credentials go to the mirror.
type Mirrors map[string]*url.URL

// ParseMirror reads one HOST=URL, the URL http:// or https:// and a host
// with no path (http://127.0.0.1:5000).
func ParseMirror(s string) (host string, mirror *url.URL, err error) {
	host, raw, ok := strings.Cut(s, "=")
	if !ok || host == "" || strings.ContainsAny(host, "/@ ") {
		return "", nil, fmt.Errorf("registry mirror %q: want HOST=URL, HOST as image names give it (registry.k8s.io), URL http:// or https:// and a host: %w", s, errdefs.ErrInvalidArgument)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.User != nil {
		return "", nil, fmt.Errorf("registry mirror %q: URL %q: want http://HOST[:PORT] or https://HOST[:PORT], no path, query or credentials: %w", s, raw, errdefs.ErrInvalidArgument)
	}
	if _, err := name.NewRegistry(host); err != nil {
		return "", nil, fmt.Errorf("registry mirror %q: host %q: %v: %w", s, host, err, errdefs.ErrInvalidArgument)
	}
	return host, &url.URL{Scheme: u.Scheme, Host: u.Host}, nil
}

// fetchRef is where r is fetched from: r itself, or the same repository
// path and tag or digest on its registry's mirror.
func (m Mirrors) fetchRef(r name.Reference) (name.Reference, error) {
	u, ok := m[r.Context().RegistryStr()]
	if !ok {
		return r, nil
	}
	var opts []name.Option
	if u.Scheme == "http" {
		opts = append(opts, name.Insecure)
	}
	s := u.Host + "/" + r.Context().RepositoryStr()
	switch t := r.(type) {
	case name.Tag:
		s += ":" + t.TagStr()
	case name.Digest:
		s += "@" + t.DigestStr()
	}
	return name.ParseReference(s, opts...)
}
