package scheduler

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	clientset "k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/component-base/configz"
	apiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"

	"github.com/vmpod/vmpod/pkg/scheduler/vmplacement"
)

// startTimeout bounds each wait for a component to come up or go down.
const startTimeout = 60 * time.Second

// controlPlane is an embedded etcd and a kube-apiserver in the test process,
// both listening on 127.0.0.1 only. Stopped by t.Cleanup: apiserver, then etcd.
type controlPlane struct {
	// config is the apiserver's loopback client config (privileged),
	// without client-side rate limits.
	config *restclient.Config
	client clientset.Interface
}

func startControlPlane(t testing.TB) *controlPlane {
	t.Helper()
	etcdURL := startEtcd(t)

	storage := storagebackend.NewDefaultConfig("/"+uuid.NewString()+"/registry", nil)
	storage.Transport.ServerList = []string{etcdURL}
	server, err := apiservertesting.StartTestServer(t, apiservertesting.NewDefaultTestServerOptions(), []string{
		// Without kube-controller-manager nothing creates service
		// accounts or removes the not-ready taint from new nodes.
		"--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
		"--endpoint-reconciler-type=none",
	}, storage)
	if err != nil {
		t.Fatalf("kube-apiserver: %v", err)
	}
	t.Cleanup(server.TearDownFn)

	cfg := restclient.CopyConfig(server.ClientConfig)
	cfg.QPS, cfg.Burst = -1, -1 // no client-side throttling
	client, err := clientset.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &controlPlane{config: cfg, client: client}
}

// startEtcd starts an embedded etcd on two free 127.0.0.1 ports and
// returns its client URL.
func startEtcd(t testing.TB) string {
	t.Helper()
	var lastErr error
	for range 3 { // a free port can be taken between picking and binding
		cfg := embed.NewConfig()
		cfg.Name = "vmpod-test"
		cfg.Dir = t.TempDir()
		cfg.UnsafeNoFsync = true // a throwaway single-member server
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		ports, err := freePorts(2)
		if err != nil {
			t.Fatal(err)
		}
		client := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", ports[0])}
		peer := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", ports[1])}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
		cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)

		e, err := embed.StartEtcd(cfg)
		if err != nil {
			lastErr = err
			continue
		}
		t.Cleanup(e.Close)
		select {
		case <-e.Server.ReadyNotify():
			return client.String()
		case err := <-e.Err():
			t.Fatalf("etcd: %v", err)
		case <-time.After(startTimeout):
			t.Fatalf("etcd not ready after %v", startTimeout)
		}
	}
	t.Fatalf("etcd: %v", lastErr)
	return ""
}

func freePorts(n int) ([]string, error) {
	var ports []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, fmt.Sprint(l.Addr().(*net.TCPAddr).Port))
	}
	return ports, nil
}

// writeKubeconfig writes a kubeconfig for the control plane's loopback
// client into dir.
func (cp *controlPlane) writeKubeconfig(t testing.TB, dir string) string {
	t.Helper()
	c := cp.config
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{
		Server:                   c.Host,
		CertificateAuthorityData: c.CAData,
		// The loopback serving certificate is issued to this name.
		TLSServerName: c.ServerName,
	}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{Token: c.BearerToken}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	path := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// startScheduler runs a kube-scheduler with VMPlacement registered, built
// by app.Setup from a KubeSchedulerConfiguration whose profiles section is
// profilesYAML, as cmd/scheduler-plugin builds it from --config. It serves
// no HTTP endpoints and does not elect a leader. The returned stop (also
// run by t.Cleanup, before the control plane stops) ends it and waits.
func (cp *controlPlane) startScheduler(t testing.TB, profilesYAML string) (stop func()) {
	t.Helper()
	dir := t.TempDir()
	config := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %s
  qps: 5000
  burst: 5000
leaderElection:
  leaderElect: false
%s`, cp.writeKubeconfig(t, dir), profilesYAML)
	configFile := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(configFile, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}

	opts := options.NewOptions()
	opts.ConfigFile = configFile
	opts.SecureServing.BindPort = 0 // no /healthz, /metrics listener

	ctx, cancel := context.WithCancel(context.Background())
	cc, sched, err := app.Setup(ctx, opts, app.WithPlugin(vmplacement.Name, vmplacement.New))
	if err != nil {
		cancel()
		t.Fatalf("scheduler setup: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, cc, sched) }()

	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			// Run returns this error whenever it ends without leader election.
			if err != nil && err.Error() != "finished without leader elect" {
				t.Errorf("scheduler: %v", err)
			}
		case <-time.After(startTimeout):
			t.Errorf("scheduler still running %v after stop", startTimeout)
		}
		// app.Run registers its configuration once per process.
		configz.Delete("componentconfig")
	}
	t.Cleanup(stop)
	return stop
}
