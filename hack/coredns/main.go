// Command coredns is CoreDNS with the plugins the local cluster's cluster
// DNS uses and no others (hack/coredns/build.sh): cluster.local from the
// API (kubernetes), the health and readiness endpoints the pod's probes
// ask, a cache, and error and query logs. No plugin that sends a query off
// this machine (forward, grpc, clouddns...) is built in: a name outside the
// cluster is answered SERVFAIL/REFUSED, never forwarded.
package main

import (
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"

	"github.com/coredns/coredns/coremain"
)

func main() { coremain.Run() }
