package shim

import (
	"context"

	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/ttrpc"
)

// errorInterceptor is the one place errors become status codes: every
// error the task service returns carries an errdefs class (or is Unknown),
// and ttrpc speaks gRPC status codes.
func errorInterceptor(ctx context.Context, unmarshal ttrpc.Unmarshaler, info *ttrpc.UnaryServerInfo, method ttrpc.Method) (any, error) {
	resp, err := method(ctx, unmarshal)
	if err != nil {
		return resp, errgrpc.ToGRPC(err)
	}
	return resp, nil
}
