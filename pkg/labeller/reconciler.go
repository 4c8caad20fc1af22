package labeller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

// FieldManager names the labeller in the Node's managedFields.
const FieldManager = "vmpod-labeller"

// Reconciler keeps one Node's owned labels equal to Labels of the node's
// capabilities.
type Reconciler struct {
	// Nodes is the client of the cluster's Nodes.
	Nodes corev1client.NodeInterface
	// Events, when set, receives a Warning event on the Node each time the
	// labeller starts saying why KVM is not used there.
	Events corev1client.EventsGetter
	// NodeName is the Node this process labels (its own node).
	NodeName string
	// Capabilities reads what the node can run now.
	Capabilities func(context.Context) (host.Host, error)
	// Interval is how often the Node's labels are checked and, when
	// something changed them, put back. Default 5m.
	Interval time.Duration
	// CapabilitiesInterval is how often Capabilities is read again; a
	// change is applied at once, without waiting for Interval. Default 1m.
	CapabilitiesInterval time.Duration
	// Log defaults to slog.Default().
	Log *slog.Logger
}

// Defaults of the Reconciler's intervals.
const (
	DefaultInterval             = 5 * time.Minute
	DefaultCapabilitiesInterval = time.Minute
	// retryMin is the first wait after a failure; it doubles up to the
	// interval of what failed.
	retryMin = 5 * time.Second
)

// Once reads the capabilities and makes the Node's labels match them.
func (r *Reconciler) Once(ctx context.Context) (Change, error) {
	h, err := r.Capabilities(ctx)
	if err != nil {
		return Change{}, fmt.Errorf("capabilities: %w", err)
	}
	return r.Apply(ctx, r.desired(h))
}

// Want is what the labeller wants on its Node: owned labels and owned
// annotations.
type Want struct {
	Labels      map[string]string
	Annotations map[string]string
}

func (w Want) equal(o Want) bool {
	return maps.Equal(w.Labels, o.Labels) && maps.Equal(w.Annotations, o.Annotations)
}

// Apply makes the Node's owned labels and annotations equal to want and
// returns what it changed; it writes nothing when they already are.
func (r *Reconciler) Apply(ctx context.Context, want Want) (Change, error) {
	node, err := r.Nodes.Get(ctx, r.NodeName, metav1.GetOptions{})
	if err != nil {
		return Change{}, fmt.Errorf("get node %q: %w", r.NodeName, err)
	}
	c := Diff(node.Labels, want.Labels)
	c.DiffAnnotations(node.Annotations, want.Annotations)
	if c.Empty() {
		return c, nil
	}
	patch, err := c.MergePatch()
	if err != nil {
		return Change{}, err
	}
	if _, err := r.Nodes.Patch(ctx, r.NodeName, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
		return Change{}, fmt.Errorf("patch node %q labels: %w", r.NodeName, err)
	}
	r.log().Info("node labels updated", "node", r.NodeName, "set", len(c.Set), "removed", len(c.Remove))
	r.log().Debug("node label changes", "set", c.Set, "removed", c.Remove,
		"setAnnotations", c.SetAnnotations, "removedAnnotations", c.RemoveAnnotations)
	if why, ok := c.SetAnnotations[vmspec.AnnotationNodeKVMReason]; ok {
		r.log().Warn("KVM is not used on this node", "node", r.NodeName, "reason", why)
		r.event(ctx, node, corev1.EventTypeWarning, EventReasonKVMUnusable, "KVM is not used on this node; VMs run under TCG: "+why)
	}
	return c, nil
}

// EventReasonKVMUnusable is the reason of the Node event that says why
// vmpod.io/kvm became "false".
const EventReasonKVMUnusable = "KVMUnusable"

// event records an event on the Node; a failure is logged, not returned:
// the labels are what matter.
func (r *Reconciler) event(ctx context.Context, node *corev1.Node, typ, reason, msg string) {
	if r.Events == nil {
		return
	}
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: node.Name + ".", Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{
			Kind: "Node", APIVersion: "v1", Name: node.Name, UID: node.UID,
		},
		Reason: reason, Message: msg, Type: typ,
		Source:         corev1.EventSource{Component: FieldManager, Host: node.Name},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if _, err := r.Events.Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		r.log().Error("record node event failed", "node", node.Name, "reason", reason, "err", err)
	}
}

// Run keeps the labels in step until ctx ends, then returns nil. Failures
// are logged and retried with backoff; the labels of the last capabilities
// read stay applied while a new read fails, so a libvirt hiccup never
// strips a node.
func (r *Reconciler) Run(ctx context.Context) error {
	interval := orDefault(r.Interval, DefaultInterval)
	capsInterval := orDefault(r.CapabilitiesInterval, DefaultCapabilitiesInterval)
	readBackoff := newBackoff(capsInterval)
	applyBackoff := newBackoff(interval)

	var (
		desired             *Want // nil until the first successful read
		dirty               bool  // desired changed since the last good Apply
		nextRead, nextCheck time.Time
	)
	for {
		now := time.Now()
		if !now.Before(nextRead) {
			if h, err := r.Capabilities(ctx); err != nil {
				nextRead = now.Add(readBackoff.fail())
				r.failed(ctx, "read capabilities", err, nextRead.Sub(now))
			} else {
				// Skipped names are logged when the labels change, not
				// on every read.
				labels, skipped := Desired(h)
				if d := (Want{labels, Annotations(h)}); desired == nil || !d.equal(*desired) {
					r.logSkipped(skipped)
					desired, dirty = &d, true
				}
				nextRead = now.Add(capsInterval)
				readBackoff.reset()
			}
		}
		if desired != nil && (dirty || !now.Before(nextCheck)) {
			if _, err := r.Apply(ctx, *desired); err != nil {
				nextCheck = now.Add(applyBackoff.fail())
				r.failed(ctx, "label node", err, nextCheck.Sub(now))
			} else {
				dirty, nextCheck = false, now.Add(interval)
				applyBackoff.reset()
			}
		}

		wait := time.Until(nextRead)
		if desired != nil {
			wait = min(wait, time.Until(nextCheck))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(max(wait, 0)):
		}
	}
}

func (r *Reconciler) failed(ctx context.Context, what string, err error, retry time.Duration) {
	if ctx.Err() != nil {
		return // stopping
	}
	r.log().Error(what+" failed", "node", r.NodeName, "retry-in", retry, "err", err)
}

// backoff doubles a retry delay from retryMin up to limit.
type backoff struct{ next, limit time.Duration }

func newBackoff(limit time.Duration) *backoff {
	return &backoff{next: min(retryMin, limit), limit: limit}
}

func (b *backoff) fail() time.Duration {
	d := b.next
	b.next = min(2*b.next, b.limit)
	return d
}

func (b *backoff) reset() { b.next = min(retryMin, b.limit) }

// desired is Labels and Annotations, logging what had to be left out.
func (r *Reconciler) desired(h host.Host) Want {
	labels, skipped := Desired(h)
	r.logSkipped(skipped)
	return Want{Labels: labels, Annotations: Annotations(h)}
}

func (r *Reconciler) logSkipped(skipped []Skipped) {
	for _, s := range skipped {
		r.log().Warn("capability not labelled", "label", s.Key, "reason", s.Reason)
	}
}

func (r *Reconciler) log() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.Default()
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// errNoNode is returned by Validate for a Reconciler without a node name.
var errNoNode = errors.New("labeller: no node name (--node-name or $NODE_NAME)")

// Validate checks that r can run.
func (r *Reconciler) Validate() error {
	switch {
	case r.NodeName == "":
		return errNoNode
	case r.Nodes == nil:
		return errors.New("labeller: no Nodes client")
	case r.Capabilities == nil:
		return errors.New("labeller: no Capabilities source")
	}
	return nil
}
