package manifests

import (
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	restclient "k8s.io/client-go/rest"
	apiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
)

// startAPIServer runs an embedded etcd and a kube-apiserver in the test
// process, both on 127.0.0.1 ports the kernel picks, and returns the
// apiserver's privileged loopback client config. Both stop at cleanup,
// apiserver first.
func startAPIServer(t *testing.T) *restclient.Config {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "manifests-test"
	cfg.Dir = filepath.Join(t.TempDir(), "etcd")
	cfg.UnsafeNoFsync = true // a throwaway single-member server
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	loopback := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{loopback}, []url.URL{loopback}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{loopback}, []url.URL{loopback}
	cfg.InitialCluster = cfg.Name + "=" + loopback.String()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("etcd: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatalf("etcd: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("etcd not ready within 60s")
	}

	storage := storagebackend.NewDefaultConfig("/manifests-test", nil)
	storage.Transport.ServerList = []string{"http://" + e.Clients[0].Addr().String()}
	server, err := apiservertesting.StartTestServer(t, apiservertesting.NewDefaultTestServerOptions(), []string{
		// As in a cluster without kube-controller-manager: nothing would
		// create the service accounts the workloads name.
		"--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
		"--endpoint-reconciler-type=none",
		// The installer and the labeller are privileged, as kubeadm and
		// kind clusters allow.
		"--allow-privileged=true",
	}, storage)
	if err != nil {
		t.Fatalf("kube-apiserver: %v", err)
	}
	t.Cleanup(server.TearDownFn)
	c := restclient.CopyConfig(server.ClientConfig)
	c.QPS, c.Burst = -1, -1
	return c
}
