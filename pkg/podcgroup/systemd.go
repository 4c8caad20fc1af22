package podcgroup

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"
	systemd "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// jobTimeout bounds a systemd job (start or stop of a scope). systemd runs
// them in order, so a busy node can take a few seconds.
const jobTimeout = 30 * time.Second

func connect(ctx context.Context) (*systemd.Conn, error) {
	// As root this falls back to systemd's private socket when there is no
	// D-Bus daemon.
	conn, err := systemd.NewWithContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect to systemd over D-Bus (the kubelet's cgroup driver is systemd): %w", err)
	}
	return conn, nil
}

// startScope makes the transient scope p.Unit in p.Slice holding pid, with
// the limits set by systemd, and waits for systemd to finish the job.
func startScope(p Path, pid int, l Limits) error {
	ctx, cancel := context.WithTimeout(context.Background(), jobTimeout)
	defer cancel()
	conn, err := connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	props := []systemd.Property{
		systemd.PropDescription("vmpod " + p.Unit),
		systemd.PropSlice(p.Slice),
		systemd.PropPids(uint32(pid)),
		prop("DefaultDependencies", false),
		// Delegate: the cgroup below the scope is ours, as runc asks for
		// its containers' scopes.
		prop("Delegate", true),
		prop("MemoryAccounting", true),
		prop("CPUAccounting", true),
	}
	if l.MemoryBytes > 0 {
		props = append(props, memoryProp(l.MemoryBytes))
	}
	props = append(props, cpuProps(l.CPU)...)
	done := make(chan string, 1)
	if _, err := conn.StartTransientUnitContext(ctx, p.Unit, "fail", props, done); err != nil {
		return fmt.Errorf("start scope %s in %s: %w", p.Unit, p.Slice, err)
	}
	return waitJob(ctx, conn, p.Unit, "start", done)
}

// stopScope stops the scope (killing what is left in it) and forgets a
// failed one; a scope that is not there is not an error.
func stopScope(unit string) error {
	ctx, cancel := context.WithTimeout(context.Background(), jobTimeout)
	defer cancel()
	conn, err := connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	done := make(chan string, 1)
	if _, err := conn.StopUnitContext(ctx, unit, "replace", done); err != nil {
		if isNoSuchUnit(err) {
			return nil
		}
		return fmt.Errorf("stop scope %s: %w", unit, err)
	}
	err = waitJob(ctx, conn, unit, "stop", done)
	_ = conn.ResetFailedUnitContext(ctx, unit) // no such unit once it is gone
	return err
}

// memoryProp is the systemd property of a memory limit: MemoryMax on v2,
// MemoryLimit on v1.
func memoryProp(bytes uint64) systemd.Property {
	if Unified() {
		return prop("MemoryMax", bytes)
	}
	return prop("MemoryLimit", bytes)
}

// setScopeMemory changes the scope's memory limit live.
func setScopeMemory(unit string, bytes uint64) error {
	return setScopeProps(unit, memoryProp(bytes))
}

// setScopeCPU changes the scope's CPU weight (shares) and quota live.
func setScopeCPU(unit string, cpu *specs.LinuxCPU) error {
	return setScopeProps(unit, cpuProps(cpu)...)
}

// setScopeProps sets properties of the scope, live and persistently.
func setScopeProps(unit string, props ...systemd.Property) error {
	if len(props) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), jobTimeout)
	defer cancel()
	conn, err := connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.SetUnitPropertiesContext(ctx, unit, true, props...)
}

// cpuProps are the systemd properties for shares (CPUShares on v1,
// CPUWeight on v2) and quota. systemd keeps the quota per second of CPU
// time in whole percent (10 ms), so it is rounded up, as runc does.
func cpuProps(cpu *specs.LinuxCPU) []systemd.Property {
	if cpu == nil {
		return nil
	}
	var props []systemd.Property
	if cpu.Shares != nil && *cpu.Shares > 0 {
		if Unified() {
			props = append(props, prop("CPUWeight", cgroup2.ConvertCPUSharesToCgroupV2Value(*cpu.Shares)))
		} else {
			props = append(props, prop("CPUShares", *cpu.Shares))
		}
	}
	if cpu.Quota != nil {
		period := uint64(100000)
		if cpu.Period != nil && *cpu.Period > 0 {
			period = *cpu.Period
		}
		perSec := uint64(math.MaxUint64) // no quota
		if *cpu.Quota > 0 {
			perSec = uint64(*cpu.Quota) * 1000000 / period
			if perSec%10000 != 0 {
				perSec = (perSec/10000 + 1) * 10000
			}
		}
		if period != 100000 {
			props = append(props, prop("CPUQuotaPeriodUSec", period))
		}
		props = append(props, prop("CPUQuotaPerSecUSec", perSec))
	}
	return props
}

func waitJob(ctx context.Context, conn *systemd.Conn, unit, what string, done <-chan string) error {
	select {
	case result := <-done:
		if result != "done" {
			_ = conn.ResetFailedUnitContext(ctx, unit)
			return fmt.Errorf("systemd could not %s %s: job %s", what, unit, result)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("systemd did not %s %s in %s", what, unit, jobTimeout)
	}
}

func prop(name string, value any) systemd.Property {
	return systemd.Property{Name: name, Value: godbus.MakeVariant(value)}
}

func isNoSuchUnit(err error) bool {
	var derr godbus.Error
	if errors.As(err, &derr) {
		return strings.HasSuffix(derr.Name, ".NoSuchUnit")
	}
	return strings.Contains(err.Error(), "not loaded")
}
