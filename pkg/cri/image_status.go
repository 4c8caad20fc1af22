package cri

import (
	"context"
	"strconv"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ListImages lists the stored images the filter lets through.
func (s *Server) ListImages(ctx context.Context, r *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	resp := &runtimeapi.ListImagesResponse{}
	if ref := r.GetFilter().GetImage().GetImage(); ref != "" {
		if img, ok := s.images.Get(ref); ok {
			resp.Images = append(resp.Images, criImage(img))
		}
		return resp, nil
	}
	for _, img := range s.images.List() {
		resp.Images = append(resp.Images, criImage(img))
	}
	return resp, nil
}

// ImageStatus is the image, or an empty answer when it is not stored.
func (s *Server) ImageStatus(ctx context.Context, r *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	img, ok := s.images.Get(r.GetImage().GetImage())
	if !ok {
		return &runtimeapi.ImageStatusResponse{}, nil
	}
	return &runtimeapi.ImageStatusResponse{Image: criImage(img)}, nil
}

// ImageFsInfo is what the stored images take on disk, unpacked.
func (s *Server) ImageFsInfo(ctx context.Context, r *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	var used, inodes uint64
	for _, img := range s.images.List() {
		used += img.Size
		inodes += img.Inodes
	}
	fs := &runtimeapi.FilesystemUsage{
		Timestamp:  time.Now().UnixNano(),
		FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: s.cfg.imageDir()},
		UsedBytes:  &runtimeapi.UInt64Value{Value: used},
		InodesUsed: &runtimeapi.UInt64Value{Value: inodes},
	}
	return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{fs}}, nil
}

// criImage is img as the CRI gives it: with its config's user as a uid
// (User "1002" or "1002:users") or a name ("www-data", "www-data:www-data"),
// as containerd reports it.
func criImage(img image) *runtimeapi.Image {
	out := &runtimeapi.Image{Id: img.ID, RepoTags: img.RepoTags, RepoDigests: img.RepoDigests, Size: img.Size}
	user, _, _ := strings.Cut(img.User, ":")
	if uid, err := strconv.ParseInt(user, 10, 64); err == nil && uid >= 0 {
		out.Uid = &runtimeapi.Int64Value{Value: uid}
	} else if user != "" {
		out.Username = user
	}
	return out
}
