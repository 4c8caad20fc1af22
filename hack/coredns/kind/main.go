// Command kind is CoreDNS for vmpod's kind node image
// (hack/kind/images.sh): the plugins of the Corefile kubeadm writes
// (errors, health, ready, kubernetes, prometheus, forward, cache, loop,
// reload, loadbalance) and log. Unlike the local cluster's (../main.go) it
// forwards names outside the cluster to the node's resolver, as any kind
// cluster's CoreDNS does: kubeadm's Corefile names forward, and CoreDNS
// refuses a Corefile with a plugin it does not have.
package main

import (
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"

	"github.com/coredns/coredns/coremain"
)

func main() { coremain.Run() }
