package vmplacement

import (
	"context"
	"fmt"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/vmpod/vmpod/pkg/vmspec"
)

// preFilterStateKey is where PreFilter leaves the pod's needs for Filter
// and Score.
const preFilterStateKey = "PreFilter" + Name

// ErrReasonInvalidVM prefixes the vmspec error of a VM pod that vmpod
// cannot run on any node (PreFilter rejects it).
const ErrReasonInvalidVM = "invalid VM pod: "

// needs is what a VM pod asks of a node: everything Filter and Score read
// from the pod. It is immutable once built. The fields are exported for
// SignPod's JSON only.
type needs struct {
	Accel       vmspec.Accel
	CPUModel    string
	CPUFeatures []string `json:",omitempty"`
	UEFI        bool
	Machine     string
	VCPUs       int
	// GuestBytes is the guest RAM: limits.memory in whole MiB.
	GuestBytes int64
	// Shares is how many filesystem volumes the guest gets as virtio-fs
	// shares: each adds to the VM's footprint.
	Shares int `json:",omitempty"`
	// CountedBytes is the memory NodeResourcesFit counts for the pod:
	// its memory requests plus pod.spec.overhead (the RuntimeClass's
	// overhead.podFixed).
	CountedBytes int64
	// Image is the containerdisk, normalized as node.status.images has it.
	Image string

	// keys are the node labels fits looks up, built once per pod.
	keys struct {
		cpuModel, machine string
		cpuFeatures       []string
	}
	// footprintTCG and footprintKVM are footprint's two answers.
	footprintTCG, footprintKVM int64
	// fit is PreFilter's verdict on each capsClass it knew, by id; nil in
	// needs built elsewhere (fitsClass).
	fit []classFit
	// filterSkipped: Filter adds nothing to NodeResourcesFit for the pod
	// on the nodes it is called for, so PreFilter skipped it, or named
	// the nodes by class and Filter passes each at once; Reserve checks
	// (skip.go).
	filterSkipped bool
}

// classFit is what fits says of a class.
type classFit struct {
	kvm    bool
	reason string
}

// Clone returns n itself: needs never change after PreFilter.
func (n *needs) Clone() fwk.StateData { return n }

// footprint is the memory the VM pod takes on a node: its guest RAM plus
// the VM's overhead under the node's accelerator, its shares' included, or
// what NodeResourcesFit counts for it if that is more.
func (n *needs) footprint(kvm bool) int64 {
	if kvm {
		return n.footprintKVM
	}
	return n.footprintTCG
}

// fitsClass is fits for a node of that class, from PreFilter's verdicts
// when it knew the class.
func (n *needs) fitsClass(c *capsClass) (kvm bool, reason string) {
	if c.id < len(n.fit) {
		return n.fit[c.id].kvm, n.fit[c.id].reason
	}
	return n.fits(&c.caps)
}

// fitsMemory reports whether the node's allocatable memory holds its pods
// and this VM, each VM at its footprint (memory.go).
func (n *needs) fitsMemory(ni fwk.NodeInfo, s *nodeState, kvm bool) bool {
	return n.footprint(kvm) <= subSat(ni.GetAllocatable().GetMemory(), usedMemory(ni, s))
}

// needsFor returns the needs of a VM pod, (nil, nil) for a pod the plugin
// ignores, and an UnschedulableAndUnresolvable status for a VM pod that is
// not a valid VM.
func (pl *VMPlacement) needsFor(pod *v1.Pod) (*needs, *fwk.Status) {
	if !pl.isVMPod(pod) {
		return nil, nil
	}
	spec, err := vmspec.FromPod(pod)
	if err != nil {
		// errors.Join puts one problem per line; an event is one line.
		msg := strings.ReplaceAll(err.Error(), "\n", "; ")
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, ErrReasonInvalidVM+msg)
	}
	n := &needs{
		Accel:        spec.Accel,
		CPUModel:     spec.CPU.Model,
		CPUFeatures:  spec.CPU.Features,
		UEFI:         spec.Firmware == vmspec.FirmwareUEFI,
		Machine:      spec.Machine,
		VCPUs:        spec.CeilingVCPUs(),
		GuestBytes:   int64(spec.MemoryBytes),
		Shares:       len(spec.Shares),
		CountedBytes: countedMemory(&framework.PodInfo{Pod: pod}),
		Image:        normalizedImageName(spec.Image),
	}
	n.keys.cpuModel = vmspec.LabelCPUModelPrefix + n.CPUModel
	n.keys.machine = vmspec.LabelMachinePrefix + n.Machine
	for _, f := range n.CPUFeatures {
		n.keys.cpuFeatures = append(n.keys.cpuFeatures, vmspec.LabelCPUFeaturePrefix+f)
	}
	n.footprintTCG = max(n.CountedBytes, vmFootprint(n.GuestBytes, n.VCPUs, n.Shares, false))
	n.footprintKVM = max(n.CountedBytes, vmFootprint(n.GuestBytes, n.VCPUs, n.Shares, true))
	return n, nil
}

// countedMemory is the memory NodeResourcesFit counts for a pod. It reads
// the PodInfo's cached resource sum, the same number NodeInfo adds to
// GetRequested() for the pod, so the two plugins agree on every feature
// gate (pod-level resources, in-place resize).
func countedMemory(pi fwk.PodInfo) int64 {
	return pi.CalculateResource().Resource.GetMemory()
}

// PreFilter reads the VM the pod asks for. It skips pods that are not VM
// pods, so that Filter is not called for them. For a VM pod it checks the
// VM against each capsClass once, and when some class that has nodes
// cannot run it, names the nodes that can (candidates) if they are at
// most half of the nodes (worthNaming). When every class
// can and Filter would add nothing to NodeResourcesFit, it skips Filter
// for the VM pod too (skip.go).
func (pl *VMPlacement) PreFilter(_ context.Context, cs fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	n, st := pl.needsFor(pod)
	if !st.IsSuccess() {
		return nil, st
	}
	if n == nil {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	if pl.members == nil {
		pl.learn(nodes)
	}
	pl.infos.update(nodes, pl.nodes.entry)
	pl.nodes.publish()
	rejecting := false
	for _, c := range pl.classes.list() {
		kvm, reason := n.fits(&c.caps)
		n.fit = append(n.fit, classFit{kvm: kvm, reason: reason})
		rejecting = rejecting || (reason != "" && c.nodes.Load() > 0)
	}
	if !rejecting {
		n.filterSkipped = pl.filterAddsNothing(cs, n, len(nodes))
	}
	cs.Write(preFilterStateKey, n)
	if n.filterSkipped {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	if !rejecting {
		return nil, nil
	}
	if selector, ok := classSelector(pod); ok && pl.members.ready(len(nodes)) {
		res := pl.candidatesByClass(n, selector, len(nodes))
		// The named nodes are those of the classes that can run the VM:
		// Filter adds nothing on them when it would add nothing on a
		// cluster of those classes alone (skip.go).
		n.filterSkipped = res != nil && pl.filterAddsNothing(cs, n, len(nodes))
		return res, nil
	}
	return pl.candidates(pod, n, nodes), nil
}

// worthNaming reports whether PreFilter should name named nodes of all.
// The framework copies the names PreFilter returns and looks each one up
// in its snapshot, and the scheduler stops filtering once it has found
// percentageOfNodesToScore of the nodes it was given as feasible (by
// default 50% less 1% per 125 nodes, at least 5% and 100 nodes): the
// fewer nodes it is given, the larger the share it looks for. When the
// names are most of the nodes, they spare few Filter calls on nodes that
// cannot run the VM, and cost a look-up of every name; at 5,000 nodes,
// naming 4,500 has the scheduler filter and score 630 of them, against
// 500 of the 5,000 without names, which it finds in about 560 Filter
// calls. A quarter of the nodes (a CPU model) is worth naming: it spares
// 1,500 Filter calls at 5,000 nodes and at 1,000 all 750 that would fail.
// Unnamed nodes that cannot run the VM get Filter's reason in the event
// rather than "didn't satisfy plugin(s) [VMPlacement]".
func worthNaming(named, all int) bool {
	return 2*named <= all
}

// classSelector returns the pod's nodeSelector when a node's class
// decides whether the pod's node affinity allows the node: the pod has no
// required node affinity, and its nodeSelector names labeller labels
// only, such as the vmpod.io/runtime=true that the shipped RuntimeClass's
// scheduling section adds to every VM pod.
func classSelector(pod *v1.Pod) (map[string]string, bool) {
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		return nil, false
	}
	for k := range pod.Spec.NodeSelector {
		if !isLabellerLabel(k) {
			return nil, false
		}
	}
	return pod.Spec.NodeSelector, true
}

// candidatesByClass is candidates for a pod whose node affinity is
// decided by class (classSelector), from the members' names of the
// classes that can run the VM and that the selector allows: no pass over
// the nodes. As candidates, it returns nil when none of those nodes has
// the memory for the VM, or when they are more than half of all nodes
// (worthNaming); it looks at them in the snapshot only until it finds one
// that has.
func (pl *VMPlacement) candidatesByClass(n *needs, selector map[string]string, all int) *fwk.PreFilterResult {
	var fitting []*capsClass
classes:
	for _, c := range pl.classes.list() {
		if _, reason := n.fitsClass(c); reason != "" || c.nodes.Load() == 0 {
			continue
		}
		for k, v := range selector {
			if w, ok := c.caps.labels[k]; !ok || w != v {
				continue classes
			}
		}
		fitting = append(fitting, c)
	}
	var size int64
	for _, c := range fitting {
		size += c.nodes.Load()
	}
	if len(fitting) == 0 || !worthNaming(int(size), all) {
		return nil
	}
	var names sets.Set[string]
	switch len(fitting) {
	case 1:
		names = pl.members.names(fitting[0])
	default:
		names = make(sets.Set[string], size)
		for _, c := range fitting {
			for name := range pl.members.names(c) {
				names.Insert(name)
			}
		}
	}
	infos := pl.snapshot.NodeInfos()
	for name := range names {
		ni, err := infos.Get(name)
		if err != nil || ni.Node() == nil {
			continue
		}
		s := pl.nodeState(ni)
		if kvm, reason := n.fitsClass(s.class); reason == "" && n.fitsMemory(ni, s, kvm) {
			return &fwk.PreFilterResult{NodeNames: names}
		}
	}
	return nil
}

// learn works out the state of every node when some are new to the
// plugin, so that the classes' node counts cover the cluster. It costs a
// pass over the nodes only in cycles that meet new nodes. With members,
// the informer's events count the nodes instead.
func (pl *VMPlacement) learn(nodes []fwk.NodeInfo) {
	if pl.nodes.size() >= len(nodes) {
		return
	}
	for _, ni := range nodes {
		if ni.Node() != nil {
			pl.nodeState(ni)
		}
	}
}

// candidates names the nodes whose labels can run the VM and that the
// pod's nodeSelector and required node affinity allow, so that the
// scheduler runs no Filter plugin on the others: for a VM that needs a CPU
// model a quarter of the nodes have, it would otherwise filter every node
// before it found enough feasible ones, and in a cluster where few nodes
// run vmpod, every VM pod would. The nodes left out get the framework's
// "didn't satisfy plugin(s) [VMPlacement]" instead of Filter's reason, so
// candidates returns nil (every node) when none of them has the memory for
// the VM: the pod then fits nowhere by VMPlacement, and Filter on every
// node gives its event the reasons (docs/scheduler.md); and nil when they
// are more than half of the nodes (worthNaming). candidates is a
// pass over the nodes, for pods with node affinity beyond labeller labels
// and while the members are not ready; candidatesByClass does without one.
func (pl *VMPlacement) candidates(pod *v1.Pod, n *needs, nodes []fwk.NodeInfo) *fwk.PreFilterResult {
	affinity := nodeaffinity.GetRequiredNodeAffinity(pod)
	var estimate int64
	for _, c := range pl.classes.list() {
		if _, reason := n.fitsClass(c); reason == "" {
			estimate += c.nodes.Load()
		}
	}
	names := make(sets.Set[string], estimate)
	roomy := false
	pl.scan.mu.Lock()
	defer pl.scan.mu.Unlock()
	if len(pl.scan.entries) != len(nodes) {
		pl.scan.entries = make([]scanEntry, len(nodes))
	}
	for i, ni := range nodes {
		node := ni.Node()
		if node == nil {
			continue
		}
		se := &pl.scan.entries[i]
		if se.ni != ni {
			*se = scanEntry{ni: ni, e: pl.nodes.entry(node.Name)}
		}
		// The class holds while the Node object does; the pods do not
		// matter here.
		s := se.e.state.Load()
		if s == nil || s.node != node {
			s = pl.nodeState(ni)
		}
		kvm, reason := n.fitsClass(s.class)
		if reason != "" {
			continue
		}
		if ok, _ := affinity.Match(node); !ok {
			continue
		}
		names.Insert(node.Name)
		roomy = roomy || n.fitsMemory(ni, pl.nodeState(ni), kvm)
	}
	if !roomy || !worthNaming(len(names), len(nodes)) {
		return nil
	}
	return &fwk.PreFilterResult{NodeNames: names}
}

// scan pairs each NodeInfo of the node list PreFilter last went through
// with the node's entry, so that candidates looks up no names while the
// list is the same (the scheduler's snapshot keeps one list and one
// NodeInfo per node until nodes come or go).
type scan struct {
	mu      sync.Mutex
	entries []scanEntry // guarded by mu
}

type scanEntry struct {
	ni fwk.NodeInfo
	e  *nodeEntry
}

// PreFilterExtensions returns nil: the needs do not depend on other pods.
// Filter reads other pods from the NodeInfo it is given, which the
// framework has already adjusted for nominated pods and preemption victims.
func (pl *VMPlacement) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// getPreFilterState returns PreFilter's needs from the cycle state.
func getPreFilterState(cs fwk.CycleState) (*needs, error) {
	d, err := cs.Read(preFilterStateKey)
	if err != nil {
		return nil, fmt.Errorf("reading %q from cycle state: %w", preFilterStateKey, err)
	}
	n, ok := d.(*needs)
	if !ok {
		return nil, fmt.Errorf("%q in cycle state is a %T, not *needs", preFilterStateKey, d)
	}
	return n, nil
}

// stateOrNeeds returns PreFilter's needs, or computes them when PreFilter
// did not run (disabled in the profile, or skipped for this pod).
func (pl *VMPlacement) stateOrNeeds(cs fwk.CycleState, pod *v1.Pod) (*needs, *fwk.Status) {
	if n, err := getPreFilterState(cs); err == nil {
		return n, nil
	}
	return pl.needsFor(pod)
}

// normalizedImageName is the image name as node.status.images lists it:
// with an explicit tag (the in-tree ImageLocality plugin does the same).
func normalizedImageName(name string) string {
	if strings.LastIndex(name, ":") <= strings.LastIndex(name, "/") {
		name += ":latest"
	}
	return name
}
