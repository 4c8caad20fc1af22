package manifests

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"sigs.k8s.io/yaml"

	"github.com/vmpod/vmpod/pkg/scheduler/vmplacement"
)

// schedulerName is the profile manifests/scheduler.yaml runs and
// docs/install.md tells VM pods to name.
const schedulerName = "vmpod-scheduler"

// checkSchedulerConfig loads the KubeSchedulerConfiguration of the
// scheduler's ConfigMap the way cmd/scheduler-plugin does (--config, with
// VMPlacement registered): a misspelt field, bad plugin args or an unknown
// plugin fail here as they would fail the Deployment. It then checks that
// the profile runs VMPlacement at Filter and Score and that the leader
// election lease is one the scheduler's Role lets it take.
func checkSchedulerConfig(t *testing.T, kubeconfig string, objs []*unstructured.Unstructured) {
	cm := find(objs, "ConfigMap", "vmpod-scheduler-config")
	if cm == nil {
		t.Fatal("no ConfigMap vmpod-scheduler-config")
	}
	text, _, _ := unstructured.NestedString(cm.Object, "data", "config.yaml")
	var config map[string]any
	if err := yaml.Unmarshal([]byte(text), &config); err != nil {
		t.Fatalf("config.yaml: %v", err)
	}
	// In the cluster the in-cluster config is used; here, the test server.
	config["clientConnection"] = map[string]any{"kubeconfig": kubeconfig}
	b, err := yaml.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}

	opts := options.NewOptions()
	opts.ConfigFile = file
	opts.SecureServing.BindPort = 0 // no listener: Setup only
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cc, sched, err := app.Setup(ctx, opts, app.WithPlugin(vmplacement.Name, vmplacement.New))
	if err != nil {
		t.Fatalf("the scheduler refuses the ConfigMap's config: %v", err)
	}
	fwk, ok := sched.Profiles[schedulerName]
	if !ok {
		t.Fatalf("no profile %q; profiles: %v", schedulerName, slices.Collect(maps.Keys(sched.Profiles)))
	}
	plugins := fwk.ListPlugins()
	for point, set := range map[string][]string{"PreFilter": names(plugins.PreFilter.Enabled), "Filter": names(plugins.Filter.Enabled), "Score": names(plugins.Score.Enabled)} {
		if !slices.Contains(set, vmplacement.Name) {
			t.Errorf("profile %s: %s plugins %v lack %s", schedulerName, point, set, vmplacement.Name)
		}
	}

	le := cc.ComponentConfig.LeaderElection
	if !le.LeaderElect {
		t.Fatal("leader election is off: two replicas would both schedule")
	}
	role := find(objs, "Role", "vmpod-scheduler-leader-election")
	if role == nil {
		t.Fatal("no Role vmpod-scheduler-leader-election")
	}
	var r rbacv1.Role
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(role.Object, &r); err != nil {
		t.Fatal(err)
	}
	granted := false
	for _, rule := range r.Rules {
		if slices.Contains(rule.Resources, "leases") && slices.Contains(rule.ResourceNames, le.ResourceName) && slices.Contains(rule.Verbs, "update") {
			granted = true
		}
	}
	if r.Namespace != le.ResourceNamespace || !granted {
		t.Errorf("the lease %s/%s is not granted by Role %s/%s", le.ResourceNamespace, le.ResourceName, r.Namespace, r.Name)
	}
}

func names(ps []schedconfig.Plugin) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}
