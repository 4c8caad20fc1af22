package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/vmpod/vmpod/internal/ociarchive"
	"github.com/vmpod/vmpod/pkg/checkpointimage"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// checkpointImageCmd: vm-runtime checkpoint-image, a checkpoint archive
// and the containerdisk it was taken over into an OCI archive to import
// (ctr images import) or push.
func checkpointImageCmd(args []string) int {
	fs := flag.NewFlagSet("checkpoint-image", flag.ContinueOnError)
	archive := fs.String("archive", "", "the checkpoint archive the kubelet's checkpoint API wrote (a VM pod's)")
	base := fs.String("base", "", "the containerdisk the checkpointed VM ran from, as an OCI layout archive")
	name := fs.String("name", "", "the new image's reference, e.g. localhost/vmpod/web:checkpoint")
	out := fs.String("o", "", "the OCI layout archive to write")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *archive == "" || *base == "" || *name == "" || *out == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "checkpoint-image: want --archive, --base, --name and -o, and no other arguments")
		return 2
	}
	tmp, err := os.MkdirTemp(filepath.Dir(*out), ".checkpoint-image-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "checkpoint-image:", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	img, err := ociarchive.Open(*base, filepath.Join(tmp, "base"))
	if err == nil {
		img, err = checkpointimage.Build(img, *archive, tmp, time.Now().UTC())
	}
	if err == nil {
		err = ociarchive.Write(*out, img, *name, time.Now().UTC())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "checkpoint-image:", err)
		return 1
	}
	// Pods of the image restore only where QEMU offers the machine type
	// the VM ran on: say how to keep them there.
	if machine, err := checkpointimage.Machine(img); err == nil && machine != "" {
		fmt.Printf("%s: a VM of machine type %s; give its pods the annotation %s: %q to place them on nodes whose QEMU offers it\n",
			*name, machine, vmspec.AnnotationMachine, machine)
	}
	return 0
}
