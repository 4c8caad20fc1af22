package vmspec

import "strings"

// DomainName is the libvirt domain name of a pod's VM. Kubernetes names are
// DNS subdomains, so "_" cannot occur in either part and the name is unique
// per node and readable in `virsh list`.
func DomainName(namespace, name string) string {
	if namespace == "" {
		namespace = "default"
	}
	return sanitize(namespace) + "_" + sanitize(name)
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.':
			return r
		}
		return '-'
	}, s)
}
