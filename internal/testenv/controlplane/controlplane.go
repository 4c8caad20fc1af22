package controlplane

import (
	"flag"
	"io"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
	apiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
)

// readyTimeout bounds the wait for etcd to serve.
const readyTimeout = 60 * time.Second

// Options are what differs between the tests' apiservers. The zero value is
// an apiserver that authorizes every authenticated request.
type Options struct {
	// Authorization is --authorization-mode, e.g. "RBAC"; "" keeps the
	// test server's default.
	Authorization string
	// AllowPrivileged is --allow-privileged, as kubeadm and kind clusters
	// set it, for workloads such as the installer and the labeller.
	AllowPrivileged bool
	// Flags are further kube-apiserver flags, e.g. "--feature-gates=...".
	Flags []string
}

func (o Options) flags() []string {
	flags := []string{
		"--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
		// No Endpoints object for the apiserver's own Service: there is
		// one member and nothing reaches it by Service.
		"--endpoint-reconciler-type=none",
	}
	if o.Authorization != "" {
		flags = append(flags, "--authorization-mode="+o.Authorization)
	}
	if o.AllowPrivileged {
		flags = append(flags, "--allow-privileged=true")
	}
	return append(flags, o.Flags...)
}

// ControlPlane is a running etcd and kube-apiserver.
type ControlPlane struct {
	// Config is the apiserver's privileged loopback client config, without
	// client-side rate limits. Copy it before changing it.
	Config *rest.Config
	// Client is a clientset over Config.
	Client kubernetes.Interface

	// dirs are the directories the control plane writes in, for this
	// package's test of cleanup.
	dirs []string
}

// Start runs an etcd and a kube-apiserver over it for the test. Both stop,
// apiserver first, and their directories go at t.Cleanup. The first Start
// in a test binary turns klog down to errors for the rest of it.
func Start(t testing.TB, opts Options) *ControlPlane {
	t.Helper()
	quietOnce.Do(quietKlog)
	etcdDir := filepath.Join(t.TempDir(), "etcd")
	etcdURL := startEtcd(t, etcdDir)

	storage := storagebackend.NewDefaultConfig("/registry", nil)
	storage.Transport.ServerList = []string{etcdURL}
	// StartTestServer removes its temporary directory itself when it
	// fails; on success TearDownFn stops the server and removes it.
	server, err := apiservertesting.StartTestServer(t, apiservertesting.NewDefaultTestServerOptions(), opts.flags(), storage)
	if err != nil {
		t.Fatalf("kube-apiserver: %v", err)
	}
	t.Cleanup(server.TearDownFn)

	cfg := rest.CopyConfig(server.ClientConfig)
	cfg.QPS, cfg.Burst = -1, -1
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &ControlPlane{Config: cfg, Client: client, dirs: []string{etcdDir, server.TmpDir}}
}

// startEtcd runs a one-member etcd in dir on loopback ports the kernel
// picks and returns its client URL.
func startEtcd(t testing.TB, dir string) string {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "vmpod-test"
	cfg.Dir = dir
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
	case <-time.After(readyTimeout):
		t.Fatalf("etcd not ready after %v", readyTimeout)
	}
	return "http://" + e.Clients[0].Addr().String()
}

// Kubeconfig writes a kubeconfig for Config into a directory of the test's
// and returns its path.
func (cp *ControlPlane) Kubeconfig(t testing.TB) string {
	t.Helper()
	c := cp.Config
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
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

var quietOnce sync.Once

// quietKlog keeps klog's output to errors for the rest of the test binary:
// at info level the apiserver (and a scheduler next to it) logs thousands
// of lines a test.
func quietKlog() {
	fs := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(fs)
	for k, v := range map[string]string{"logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "ERROR"} {
		if err := fs.Set(k, v); err != nil {
			panic(err)
		}
	}
	klog.SetOutput(io.Discard)
}
