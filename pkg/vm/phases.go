package vm

import (
	"fmt"
	"strings"
	"time"
)

// Phase is how long one step of making or starting a VM took.
type Phase struct {
	Name string
	Took time.Duration
}

// Phases are the steps of a VM's making and start, in order: "intake",
// "open", "network", "devices", "seed" (Create), "overlay", "jail",
// "define" (the Machine's create), then "qemu" (libvirt starting QEMU,
// paused), "limit", "console", "prepare" (the cgroup) and "resume"
// (Start). A step a VM has no use for is absent.
type Phases []Phase

// String is "name=duration" for each phase, space-separated: what a
// front door logs, and ParsePhases reads.
func (p Phases) String() string {
	var b strings.Builder
	for i, ph := range p {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%s", ph.Name, ph.Took)
	}
	return b.String()
}

// ParsePhases reads what Phases.String wrote.
func ParsePhases(s string) (Phases, error) {
	var p Phases
	for _, f := range strings.Fields(s) {
		name, d, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Errorf("phase %q: want name=duration", f)
		}
		took, err := time.ParseDuration(d)
		if err != nil {
			return nil, fmt.Errorf("phase %q: %w", f, err)
		}
		p = append(p, Phase{Name: name, Took: took})
	}
	return p, nil
}

// stopwatch appends a Phase for each lap: the time since the last one.
type stopwatch struct {
	last   time.Time
	phases *Phases
}

func newStopwatch(p *Phases) stopwatch { return stopwatch{last: time.Now(), phases: p} }

func (s *stopwatch) lap(name string) {
	now := time.Now()
	*s.phases = append(*s.phases, Phase{Name: name, Took: now.Sub(s.last)})
	s.last = now
}
