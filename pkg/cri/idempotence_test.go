package cri

import (
	"context"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vmpod/vmpod/pkg/vmd"
)

// TestAbsentIsNoError: stopping or removing a sandbox, container or
// image this server does not know is no error, as the CRI asks (critest's
// Idempotence specs); a server with no VM opens no libvirt for it.
func TestAbsentIsNoError(t *testing.T) {
	ctx := context.Background()
	s := newIdleServer(t)
	const absent = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for name, call := range map[string]func() error{
		"StopPodSandbox": func() error {
			_, err := s.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: absent})
			return err
		},
		"RemovePodSandbox": func() error {
			_, err := s.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: absent})
			return err
		},
		"StopContainer": func() error {
			_, err := s.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: absent, Timeout: 1})
			return err
		},
		"RemoveContainer": func() error {
			_, err := s.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: absent})
			return err
		},
		"RemoveImage": func() error {
			_, err := s.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: "localhost/absent:v1"}})
			return err
		},
	} {
		if err := call(); err != nil {
			t.Errorf("%s of an absent object: %v, want no error", name, err)
		}
	}
}

// newIdleServer is a server with its state in a temporary dir and no VM
// (so no libvirt), closed when the test ends.
func newIdleServer(t *testing.T) *Server {
	t.Helper()
	dir := t.TempDir()
	s, err := New(context.Background(), Config{Config: vmd.Config{StateRoot: dir}, NetnsDir: dir + "/netns", CNIConfDir: dir + "/cni"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
