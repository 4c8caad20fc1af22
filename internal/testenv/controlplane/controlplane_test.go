package controlplane

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestStart starts a control plane with RBAC in a subtest, uses it through
// the clientset and through the kubeconfig, and checks that once the
// subtest is over nothing listens and its directories are gone.
func TestStart(t *testing.T) {
	var dirs []string
	var host string
	t.Run("running", func(t *testing.T) {
		cp := Start(t, Options{Authorization: "RBAC", AllowPrivileged: true})
		dirs, host = cp.dirs, cp.Config.Host
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// RBAC is on: its bootstrap roles are there.
		if _, err := cp.Client.RbacV1().ClusterRoles().Get(ctx, "cluster-admin", metav1.GetOptions{}); err != nil {
			t.Errorf("cluster-admin: %v", err)
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig(t))
		if err != nil {
			t.Fatal(err)
		}
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "vmpod-test"}}
		if _, err := client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Errorf("through the kubeconfig: %v", err)
		}
	})
	if len(dirs) != 2 || host == "" {
		t.Fatalf("the subtest did not start a control plane: dirs %v, host %q", dirs, host)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is left after cleanup (stat: %v)", d, err)
		}
	}
	u, err := url.Parse(host)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", u.Host, time.Second); err == nil {
		c.Close()
		t.Errorf("the apiserver still listens on %s after cleanup", u.Host)
	}
}
