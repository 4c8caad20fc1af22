package vmspec

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/resource"
)

var (
	// A libvirt CPU model or machine type name; never a path.
	namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	// A libvirt CPU feature name (avx2, sse4.2, tsc-deadline, 3dnowprefetch).
	featurePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	// A Kubernetes volume name (DNS-1123 label).
	volumeNamePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
)

// applyAnnotations fills s from the vmpod.io/ annotations, defaults first.
// Annotations outside the prefix are ignored; an unknown key inside it is an
// error, because a typo would otherwise silently do nothing. All problems
// are returned together.
func applyAnnotations(s *Spec, ann map[string]string) error {
	s.Accel = AccelAuto
	s.CPU = CPU{Model: CPUModelAuto}
	s.Firmware = FirmwareBIOS
	s.Machine = DefaultMachine
	s.Boot = Boot{Source: BootAuto}
	s.DiskBus = DiskBusVirtio
	s.Console = true
	s.NICs = []NIC{{Name: "eth0"}}

	var errs []error
	keys := make([]string, 0, len(ann))
	for k := range ann {
		if strings.HasPrefix(k, Prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys) // report errors in a stable order
	var ci CloudInit
	for _, k := range keys {
		if err := applyAnnotation(s, &ci, k, ann[k]); err != nil {
			errs = append(errs, err)
		}
	}
	if ci.UserData != "" || ci.NetworkConfig != "" || ci.Volume != "" || len(ci.SSHKeys) > 0 {
		s.CloudInit = &ci
	}
	return errors.Join(errs...)
}

func applyAnnotation(s *Spec, ci *CloudInit, key, v string) error {
	info, ok := annotationInfo(key)
	if !ok {
		return notOneOf(key, "", AnnotationKeys()...).withDetail("unknown vmpod annotation")
	}
	if info.Type == "enum" && !slices.Contains(info.Values, v) {
		return notOneOf(key, v, info.Values...)
	}
	switch key {
	case AnnotationAccel:
		s.Accel = Accel(v)
	case AnnotationFirmware:
		s.Firmware = Firmware(v)
	case AnnotationBoot:
		s.Boot.Source = BootSource(v)
	case AnnotationDiskBus:
		s.DiskBus = DiskBus(v)
	case AnnotationConsole:
		s.Console = v == "on"
	case AnnotationMemoryHotplug:
		s.MemoryHotplug = MemoryHotplug(v)
	case AnnotationNestedVirt:
		s.CPU.Nested = v == "on"
	case AnnotationNetwork:
		if v == "none" {
			s.NICs = nil
		}
	case AnnotationCPUModel:
		if !namePattern.MatchString(v) {
			return invalid(key, v, "want auto, host-passthrough, host-model or a libvirt CPU model name such as Skylake-Client")
		}
		s.CPU.Model = v
	case AnnotationCPUFeatures:
		feats, err := parseList(key, v, featurePattern, "a libvirt CPU feature name such as avx2")
		if err != nil {
			return err
		}
		s.CPU.Features = feats
	case AnnotationMachine:
		if !namePattern.MatchString(v) {
			return invalid(key, v, "want a QEMU machine type such as q35, pc or pc-q35-7.2")
		}
		s.Machine = v
	case AnnotationKernelCmdline:
		if err := checkText(key, v, MaxCmdlineLen, false); err != nil {
			return err
		}
		s.Boot.Cmdline = strings.TrimSpace(v)
	case AnnotationCloudInitUserData:
		if err := checkText(key, v, MaxCloudInitLen, true); err != nil {
			return err
		}
		ci.UserData = v
	case AnnotationCloudInitNetworkConfig:
		if err := checkText(key, v, MaxCloudInitLen, true); err != nil {
			return err
		}
		ci.NetworkConfig = v
	case AnnotationCloudInitVolume:
		if !volumeNamePattern.MatchString(v) {
			return invalid(key, v, "want the name of a configMap or secret volume of the pod")
		}
		ci.Volume = v
	case AnnotationMaxVCPUs:
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxVCPUs {
			return invalid(key, v, fmt.Sprintf("want a whole number of vCPUs from 1 to %d", MaxVCPUs))
		}
		s.MaxVCPUs = n
	case AnnotationMaxMemory:
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return invalid(key, v, "want a memory quantity such as 1Gi or 512Mi")
		}
		b := memoryBytes(q)
		if b < MinMemoryBytes || b > MaxMemoryBytes {
			return invalid(key, v, "want from 64Mi to 1Ti of guest RAM")
		}
		s.MaxMemoryBytes = b
	case AnnotationSSHAuthorizedKeys:
		keys, err := parseSSHKeys(key, v)
		if err != nil {
			return err
		}
		ci.SSHKeys = keys
	}
	return nil
}

func (e *FieldError) withDetail(d string) *FieldError {
	e.Detail = d
	return e
}

// parseList splits a comma-separated list, trims, sorts and deduplicates it.
func parseList(key, v string, item *regexp.Regexp, want string) ([]string, error) {
	var out []string
	for f := range strings.SplitSeq(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !item.MatchString(f) {
			return nil, invalid(key, f, "want "+want)
		}
		out = append(out, f)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// checkText accepts UTF-8 text up to max bytes; multiline allows newlines and
// tabs (cloud-init YAML), otherwise any control character is refused (a
// kernel command line is one line).
func checkText(key, v string, max int, multiline bool) error {
	if len(v) > max {
		return invalid(key, "", "longer than "+itoa(max)+" bytes")
	}
	if !utf8.ValidString(v) {
		return invalid(key, "", "not valid UTF-8")
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			if multiline && (r == '\n' || r == '\t' || r == '\r') {
				continue
			}
			return invalid(key, "", "contains a control character")
		}
	}
	return nil
}

func parseSSHKeys(key, v string) ([]string, error) {
	if err := checkText(key, v, MaxCloudInitLen, true); err != nil {
		return nil, err
	}
	var keys []string
	for line := range strings.SplitSeq(v, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 || !isSSHKeyType(fields[0]) {
			return nil, invalid(key, line, "want one OpenSSH public key per line (ssh-ed25519 AAAA... comment)")
		}
		keys = append(keys, line)
	}
	return keys, nil
}

func isSSHKeyType(t string) bool {
	return strings.HasPrefix(t, "ssh-") || strings.HasPrefix(t, "ecdsa-sha2-") || strings.HasPrefix(t, "sk-")
}
