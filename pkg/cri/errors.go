package cri

import (
	"context"
	"errors"
	"fmt"

	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/log"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// errorInterceptor is the one place an error becomes a gRPC status: the
// class the code wrapped (errdefs) picks the code, the message stays.
// An error without a class is Unknown and logged, since it is a bug of
// ours to fix.
func errorInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err == nil {
		return resp, nil
	}
	return resp, toStatus(ctx, info.FullMethod, err)
}

func toStatus(ctx context.Context, method string, err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	s := errgrpc.ToGRPC(err)
	if status.Code(s) == codes.Unknown {
		log.G(ctx).WithError(err).Warnf("%s: an error without a class (errdefs)", method)
	}
	return s
}

// notFound and friends classify the CRI's own refusals.
func notFound(what, id string) error {
	return errorf(errdefs.ErrNotFound, "%s %q", what, id)
}

// errorf is fmt.Errorf with class wrapped at the end.
func errorf(class error, format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, class)...)
}
