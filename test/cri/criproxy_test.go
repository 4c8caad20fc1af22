package cri_test

import (
	"errors"
	"net"
	"path/filepath"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// guestMemory is the memory limit, so the guest's RAM, that the proxy
// gives a container whose config has none.
const guestMemory = 256 << 20

// serveMemoryProxy serves the CRI on a socket of its own in the test's
// dir, forwarding every call to the server unchanged but CreateContainer,
// to which it adds a memory limit (guestMemory) when the container has
// none. A VM's RAM is its container's memory limit, which vmpod requires
// (a pod for a VM always sets it); critest's containers set none. It
// returns the proxy's socket. Unary calls only: the CRI's one streaming
// call (GetContainerEvents) is one vm-runtime cri does not serve.
func (n *node) serveMemoryProxy() string {
	t := n.t
	conn, err := grpc.NewClient("unix://"+n.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	sock := filepath.Join(n.dir, "critest.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(stream)
		var in []byte
		if err := stream.RecvMsg(&in); err != nil {
			return err
		}
		if method == "/runtime.v1.RuntimeService/CreateContainer" {
			var err error
			if in, err = withMemoryLimit(in); err != nil {
				return err
			}
		}
		ctx := stream.Context()
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			ctx = metadata.NewOutgoingContext(ctx, md)
		}
		var out []byte
		if err := conn.Invoke(ctx, method, &in, &out, grpc.ForceCodec(rawCodec{})); err != nil {
			return err // a status error goes back to critest as it is
		}
		return stream.SendMsg(&out)
	}))
	go g.Serve(l)
	t.Cleanup(g.Stop)
	return sock
}

// withMemoryLimit is the CreateContainerRequest in, with guestMemory as
// its memory limit if it has none.
func withMemoryLimit(in []byte) ([]byte, error) {
	var r runtimeapi.CreateContainerRequest
	if err := proto.Unmarshal(in, &r); err != nil {
		return nil, err
	}
	cfg := r.GetConfig()
	if cfg == nil {
		return in, nil
	}
	if cfg.Linux == nil {
		cfg.Linux = &runtimeapi.LinuxContainerConfig{}
	}
	if cfg.Linux.Resources == nil {
		cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{}
	}
	if cfg.Linux.Resources.MemoryLimitInBytes <= 0 {
		cfg.Linux.Resources.MemoryLimitInBytes = guestMemory
	}
	return proto.Marshal(&r)
}

// rawCodec passes messages through as bytes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, errors.New("rawCodec: not *[]byte")
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return errors.New("rawCodec: not *[]byte")
	}
	*b = append((*b)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }
