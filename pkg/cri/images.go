package cri

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/containerd/errdefs"
	"github.com/containerd/log"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"golang.org/x/sys/unix"

	"github.com/vmpod/vmpod/internal/ckpt"
	"github.com/vmpod/vmpod/internal/untar"
)

// image is one stored image, known by its config digest (its CRI id), as
// images/<algorithm>/<hex>/{image.json,rootfs/}. Its rootfs is unpacked
// once, read-only, and every VM of the image boots from it through its own
// overlay.
type image struct {
	ID          string   `json:"id"`
	RepoTags    []string `json:"repoTags,omitempty"`
	RepoDigests []string `json:"repoDigests,omitempty"`
	// Size is what the unpacked image takes on disk, in bytes; Inodes the
	// number of its files and dirs.
	Size   uint64 `json:"size"`
	Inodes uint64 `json:"inodes"`
	// User is the image config's User (uid or name, ":group" maybe),
	// which ImageStatus reports for the kubelet's runAsNonRoot check.
	User string `json:"user,omitempty"`
}

// imageStore is the node's images under one dir.
type imageStore struct {
	dir     string
	limits  untar.Limits // what one image may unpack into
	mirrors Mirrors      // registries fetched from elsewhere

	mu     sync.Mutex
	images map[string]*image // by ID
	// busy holds, by image ID, a channel closed when the pull or the
	// removal holding that ID (lockID) ends. Two pulls of one image
	// unpack it once, and an image is never removed while it is being
	// written; but nothing waits for another image, so a pull stalled on
	// its registry holds up no other pull and no removal.
	busy map[string]chan struct{}
}

func openImageStore(ctx context.Context, dir string, limits untar.Limits, mirrors Mirrors) (*imageStore, error) {
	s := &imageStore{dir: dir, limits: limits, mirrors: mirrors, images: map[string]*image{}, busy: map[string]chan struct{}{}}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	algos, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, a := range algos {
		if !a.IsDir() || strings.HasPrefix(a.Name(), ".") {
			continue
		}
		// What an unpack cut short by a crash left.
		torn, _ := filepath.Glob(filepath.Join(dir, a.Name(), unpackPrefix+"*"))
		for _, p := range torn {
			if err := os.RemoveAll(p); err != nil {
				log.G(ctx).WithError(err).Warn("remove a torn unpack")
			}
		}
		imgs, errs := ckpt.ReadAll[image](filepath.Join(dir, a.Name()), checkpointVersion)
		for _, err := range errs {
			log.G(ctx).WithError(err).Warn("skip an image record")
		}
		for _, img := range imgs {
			s.images[img.ID] = &img
		}
	}
	return s, nil
}

// path is where the image with id keeps its files; its record is
// path+".json".
func (s *imageStore) path(id string) (string, error) {
	algo, hex, ok := strings.Cut(id, ":")
	if !ok || algo != "sha256" || len(hex) != 64 || strings.Trim(hex, "0123456789abcdef") != "" {
		return "", errorf(errdefs.ErrInvalidArgument, "image id %q: want sha256:<64 hex digits>", id)
	}
	return filepath.Join(s.dir, algo, hex), nil
}

// Rootfs is the unpacked image with id.
func (s *imageStore) Rootfs(id string) (string, error) {
	p, err := s.path(id)
	if err != nil {
		return "", err
	}
	return filepath.Join(p, "rootfs"), nil
}

// Get finds an image by id (sha256:..., or its hex alone), by one of its
// tags or digests, or by a name that parses to one of them.
func (s *imageStore) Get(ref string) (image, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if img := s.find(ref); img != nil {
		return *img, true
	}
	return image{}, false
}

func (s *imageStore) find(ref string) *image {
	if img, ok := s.images[ref]; ok {
		return img
	}
	if img, ok := s.images["sha256:"+ref]; ok {
		return img
	}
	names := []string{ref}
	if r, err := name.ParseReference(ref); err == nil {
		names = append(names, r.Name())
	}
	for _, img := range s.images {
		for _, n := range names {
			if slices.Contains(img.RepoTags, n) || slices.Contains(img.RepoDigests, n) {
				return img
			}
		}
	}
	return nil
}

// List is every image.
func (s *imageStore) List() []image {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]image, 0, len(s.images))
	for _, img := range s.images {
		out = append(out, *img)
	}
	slices.SortFunc(out, func(a, b image) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Pull fetches ref for this node's platform with auth (nil: anonymous),
// from its registry's mirror if it has one, and returns its id. An image already stored is not unpacked again; the
// tag moves to it from any other image, as a registry's tag does. The
// unpack stays within s.limits, and holds only its own image's ID while
// it reads the registry (lockID).
func (s *imageStore) Pull(ctx context.Context, ref string, auth *authn.AuthConfig) (string, error) {
	r, err := name.ParseReference(ref)
	if err == nil && r.Context().RegistryStr() == "localhost" {
		// As containerd's resolver (docker.MatchLocalhost): a registry on
		// this machine may speak plain HTTP, tried after HTTPS.
		// go-containerregistry does so by itself for localhost:<port> and
		// 127.0.0.1, not for a bare "localhost" (port 80).
		r, err = name.ParseReference(ref, name.Insecure)
	}
	if err != nil {
		return "", errorf(errdefs.ErrInvalidArgument, "image %q: %v", ref, err)
	}
	from, err := s.mirrors.fetchRef(r)
	if err != nil {
		return "", errorf(errdefs.ErrInvalidArgument, "image %q through its registry's mirror: %v", ref, err)
	}
	opts := []remote.Option{remote.WithContext(ctx),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH})}
	if auth != nil {
		opts = append(opts, remote.WithAuth(authn.FromConfig(*auth)))
	}
	img, err := remote.Image(from, opts...)
	if err != nil {
		if from != r {
			return "", pullError(ref+" (from its registry's mirror "+from.Context().RegistryStr()+")", err)
		}
		return "", pullError(ref, err)
	}
	cfg, err := img.ConfigName()
	if err != nil {
		return "", pullError(ref, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return "", pullError(ref, err)
	}
	id := cfg.String()
	dir, err := s.path(id)
	if err != nil {
		return "", err
	}

	unlock, err := s.lockID(ctx, id)
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, ok := s.Get(id); !ok {
		rec, err := unpackImage(img, dir, s.limits)
		if err != nil {
			return "", pullError(ref, err)
		}
		rec.ID = id
		s.mu.Lock()
		s.images[id] = rec
		s.mu.Unlock()
	}
	repoDigest := r.Context().Name() + "@" + digest.String()
	var tag string
	if t, ok := r.(name.Tag); ok {
		tag = t.Name()
	}
	return id, s.update(id, func(img *image) {
		if tag != "" && !slices.Contains(img.RepoTags, tag) {
			img.RepoTags = append(img.RepoTags, tag)
		}
		if !slices.Contains(img.RepoDigests, repoDigest) {
			img.RepoDigests = append(img.RepoDigests, repoDigest)
		}
	}, tag)
}

// lockID waits until no other pull or removal holds the image id, then
// holds it until unlock. It gives up when ctx ends.
func (s *imageStore) lockID(ctx context.Context, id string) (unlock func(), _ error) {
	for {
		s.mu.Lock()
		held, ok := s.busy[id]
		if !ok {
			done := make(chan struct{})
			s.busy[id] = done
			s.mu.Unlock()
			return func() {
				s.mu.Lock()
				delete(s.busy, id)
				s.mu.Unlock()
				close(done)
			}, nil
		}
		s.mu.Unlock()
		select {
		case <-held:
		case <-ctx.Done():
			return nil, fmt.Errorf("image %s: waiting for another pull of it: %w", id, ctx.Err())
		}
	}
}

// update changes the record of id and saves it; a tag given moves off
// every other image.
func (s *imageStore) update(id string, f func(*image), tag string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	img := s.images[id]
	if img == nil {
		return notFound("image", id)
	}
	if tag != "" {
		for _, other := range s.images {
			if other != img && slices.Contains(other.RepoTags, tag) {
				other.RepoTags = slices.DeleteFunc(other.RepoTags, func(t string) bool { return t == tag })
				if err := s.save(other); err != nil {
					return err
				}
			}
		}
	}
	f(img)
	return s.save(img)
}

func (s *imageStore) save(img *image) error {
	dir, err := s.path(img.ID)
	if err != nil {
		return err
	}
	if err := ckpt.Write(dir+".json", checkpointVersion, *img); err != nil {
		return errorf(errdefs.ErrInternal, "image record %s: %v", img.ID, err)
	}
	return nil
}

// Remove deletes the image ref names, record first: a crash in between
// leaves files no record names, which the next pull replaces. It waits
// for no registry: an image being unpacked has no record yet.
func (s *imageStore) Remove(ctx context.Context, ref string) error {
	found, ok := s.Get(ref)
	if !ok {
		return nil // the CRI: removing an absent image is no error
	}
	unlock, err := s.lockID(ctx, found.ID)
	if err != nil {
		return err
	}
	defer unlock()
	s.mu.Lock()
	img := s.images[found.ID]
	delete(s.images, found.ID)
	s.mu.Unlock()
	if img == nil {
		return nil // removed meanwhile
	}
	dir, err := s.path(img.ID)
	if err != nil {
		return err
	}
	if err := ckpt.RemoveFile(dir + ".json"); err != nil {
		return errorf(errdefs.ErrInternal, "image %s: %v", img.ID, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return errorf(errdefs.ErrInternal, "image %s: %v", img.ID, err)
	}
	return nil
}

// unpackPrefix starts the name of an unpack's temp dir, beside the
// images' dirs.
const unpackPrefix = ".unpack-"

// unpackImage writes img's flattened layers into dir/rootfs, read-only,
// within lim, through a temp dir, so dir appears whole or not at all.
func unpackImage(img v1.Image, dir string, lim untar.Limits) (*image, error) {
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	ls := make([]untar.Layer, len(layers))
	for i, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return nil, err
		}
		ls[i] = untar.Layer{Name: d.String(), Open: l.Uncompressed}
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), unpackPrefix)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	rootfs := filepath.Join(tmp, "rootfs")
	if err := untar.ExtractLayers(rootfs, ls, lim); err != nil {
		return nil, fmt.Errorf("unpack: %w", err)
	}
	rec := &image{}
	if cf, err := img.ConfigFile(); err == nil && cf != nil {
		rec.User = cf.Config.User
	}
	if err := readOnly(rootfs, rec); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(dir); err != nil { // a torn earlier unpack
		return nil, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nil, err
	}
	return rec, nil
}

// readOnly takes every write bit off the tree at root and counts what it
// takes on disk into rec.
func readOnly(root string, rec *image) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		rec.Size += uint64(st.Blocks) * 512
		rec.Inodes++
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		return unix.Chmod(p, st.Mode&07777&^0o222)
	})
}

// limitSettings name where a node admin sets each bound of an unpack.
var limitSettings = map[untar.Limit]string{
	untar.LimitBytes:   "vm-runtime cri --image-max-bytes",
	untar.LimitEntries: "vm-runtime cri --image-max-entries",
	untar.LimitDepth:   "vm-runtime cri --image-max-depth",
	untar.LimitPathLen: "the kernel's PATH_MAX",
}

// pullError classifies a failed pull: an image past one of the node's
// bounds is ResourceExhausted; by the registry's answer, no such image
// is NotFound, refused credentials Unauthenticated or PermissionDenied;
// the rest (the registry, the network, the unpack) Unavailable.
func pullError(ref string, err error) error {
	if le := (*untar.LimitError)(nil); errors.As(err, &le) {
		return errorf(errdefs.ErrResourceExhausted, "pull %s: %v (%s)", ref, err, limitSettings[le.Limit])
	}
	var class error = errdefs.ErrUnavailable
	var te *transport.Error
	if errors.As(err, &te) {
		switch te.StatusCode {
		case http.StatusNotFound:
			class = errdefs.ErrNotFound
		case http.StatusUnauthorized:
			class = errdefs.ErrUnauthenticated
		case http.StatusForbidden:
			class = errdefs.ErrPermissionDenied
		}
	}
	return errorf(class, "pull %s: %v", ref, err)
}
