package vm

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/errdefs"
	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"

	"github.com/vmpod/vmpod/pkg/vmspec"
)

// NoCloud file names, as cloud-init's NoCloud data source reads them from
// a filesystem labelled cidata.
const (
	userData      = "user-data"
	metaData      = "meta-data"
	networkConfig = "network-config"
	// vendorData carries the cloud-config of vmpod's own making: the
	// shares' mounts. User-data overrides it key by key.
	vendorData = "vendor-data"
	// SharesFile lists the guest's shares for a guest without cloud-init
	// (the test guest's init): a line per share, "<tag> <ro|rw> <mount
	// path>", the path written as fstab writes it (space, tab, newline
	// and backslash as octal escapes), in mount path order.
	SharesFile = "vmpod-shares"
	// maxSeedFile bounds each file read from a ConfigMap or Secret volume.
	maxSeedFile = 1 << 20
)

// NoCloudFiles is the content of the NoCloud seed for ci: from the files of
// the pod's volume (volumeDir, "" for inline data) or from the annotations,
// with meta-data naming the instance and the host and carrying the SSH keys.
func NoCloudFiles(ci vmspec.CloudInit, volumeDir, instanceID, hostname string) (map[string][]byte, error) {
	files := map[string][]byte{}
	if ci.Volume != "" {
		for _, name := range []string{userData, metaData, networkConfig} {
			b, err := readSeedFile(volumeDir, name)
			if err != nil {
				return nil, err
			}
			if b != nil {
				files[name] = b
			}
		}
	} else {
		files[userData] = []byte(ci.UserData)
		if ci.NetworkConfig != "" {
			files[networkConfig] = []byte(ci.NetworkConfig)
		}
	}
	if _, ok := files[userData]; !ok {
		files[userData] = nil // NoCloud needs the file, even empty
	}
	if _, ok := files[metaData]; !ok {
		files[metaData] = metaDataFor(instanceID, hostname, ci.SSHKeys)
	}
	return files, nil
}

// readSeedFile reads one key of a ConfigMap or Secret volume; nil if the
// key is absent. Keys are symlinks into the kubelet's ..data dir, which is
// why this follows links, but only within the volume.
func readSeedFile(dir, name string) ([]byte, error) {
	p := filepath.Join(dir, name)
	real, err := filepath.EvalSymlinks(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rdir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(real, rdir+string(filepath.Separator)) {
		return nil, fmt.Errorf("%s: %s points outside the volume: %w", vmspec.AnnotationCloudInitVolume, name, errdefs.ErrInvalidArgument)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxSeedFile {
		return nil, fmt.Errorf("%s: %s is not a regular file of at most 1 MiB: %w", vmspec.AnnotationCloudInitVolume, name, errdefs.ErrInvalidArgument)
	}
	return os.ReadFile(real)
}

// metaDataFor writes NoCloud meta-data as YAML by hand: three keys whose
// values are quoted so no key or hostname can change the document's shape.
func metaDataFor(instanceID, hostname string, keys []string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "instance-id: %q\n", instanceID)
	if hostname != "" {
		fmt.Fprintf(&b, "local-hostname: %q\n", hostname)
	}
	if len(keys) > 0 {
		b.WriteString("public-keys:\n")
		for _, k := range keys {
			fmt.Fprintf(&b, "  - %q\n", k)
		}
	}
	return []byte(b.String())
}

// WriteNoCloudISO writes files as an ISO 9660 image labelled cidata, with
// Rock Ridge and Joliet so that names like user-data survive.
func WriteNoCloudISO(path string, files map[string][]byte) (retErr error) {
	size := int64(1 << 20)
	for _, b := range files {
		size += int64(len(b)) + 2048
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	d, err := diskfs.Create(path, size, diskfs.SectorSizeDefault)
	if err != nil {
		return fmt.Errorf("cloud-init seed: %w", err)
	}
	defer func() {
		if retErr != nil {
			os.Remove(path)
		}
	}()
	defer d.Close()
	d.LogicalBlocksize = 2048
	work, err := os.MkdirTemp(filepath.Dir(path), ".cidata-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	f, err := d.CreateFilesystem(disk.FilesystemSpec{FSType: filesystem.TypeISO9660, VolumeLabel: "cidata", WorkDir: work})
	if err != nil {
		return fmt.Errorf("cloud-init seed: %w", err)
	}
	for name, content := range files {
		w, err := f.OpenFile("/"+name, os.O_CREATE|os.O_RDWR)
		if err != nil {
			return fmt.Errorf("cloud-init seed %s: %w", name, err)
		}
		if _, err := w.Write(content); err != nil {
			return fmt.Errorf("cloud-init seed %s: %w", name, err)
		}
	}
	iso, ok := f.(*iso9660.FileSystem)
	if !ok {
		return fmt.Errorf("cloud-init seed: not an ISO 9660 filesystem")
	}
	return iso.Finalize(iso9660.FinalizeOptions{RockRidge: true, Joliet: true, VolumeIdentifier: "cidata"})
}

// ShareSeedFiles are the seed's files that tell the guest its shares (nil
// for none): SharesFile, and vendor-data whose mounts: a cloud image's
// cloud-init writes into fstab and mounts ("nofail": a guest without
// virtio-fs boots on). cloud-init's mounts module writes an entry's path
// as it is given, so a path with a space or a tab does not reach fstab
// whole (SharesFile's test guest mounts it).
func ShareSeedFiles(shares []vmspec.Share) map[string][]byte {
	if len(shares) == 0 {
		return nil
	}
	var list, vendor strings.Builder
	vendor.WriteString("#cloud-config\nmounts:\n")
	for _, sh := range shares {
		mode := "rw"
		if sh.ReadOnly {
			mode = "ro"
		}
		fmt.Fprintf(&list, "%s %s %s\n", sh.Tag, mode, fstabEscape(sh.MountPath))
		// JSON strings are YAML's double-quoted scalars.
		fmt.Fprintf(&vendor, "  - [%s, %s, virtiofs, \"%s,nofail\", \"0\", \"0\"]\n", jsonString(sh.Tag), jsonString(sh.MountPath), mode)
	}
	return map[string][]byte{SharesFile: []byte(list.String()), vendorData: []byte(vendor.String())}
}

// fstabEscape writes p as fstab(5) does: space, tab, newline and
// backslash as octal escapes.
func fstabEscape(p string) string {
	return strings.NewReplacer(`\`, `\134`, " ", `\040`, "\t", `\011`, "\n", `\012`).Replace(p)
}

func jsonString(s string) string {
	b, _ := json.Marshal(s) // a string always marshals
	return string(b)
}
