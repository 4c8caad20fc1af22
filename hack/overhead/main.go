// Command overhead measures what a vmpod VM costs beyond its guest RAM under
// TCG: it boots the test guest (hack/guest/build.sh) through vmspec, the
// converter and the embedded libvirt driver, exactly as the runtime does,
// for several guest sizes and vCPU counts, makes the guest touch all of its
// RAM (the kernel's init_on_free=1 zeroes every free page at boot), samples
// QEMU's memory and this process's (the old stand-in for the shim; the
// model now takes the real shim's size from -shim-mib), prints the table
// and fits the linear model of vmspec.Overhead.
//
// Run it through hack/measure-overhead.sh, which gives it a network
// namespace with a tap for the guest NIC and cleans up after it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmpod/vmpod/pkg/convert"
	"github.com/vmpod/vmpod/pkg/host"
	"github.com/vmpod/vmpod/pkg/jail"
	"github.com/vmpod/vmpod/pkg/node"
	"github.com/vmpod/vmpod/pkg/virt/libvirt"
	"github.com/vmpod/vmpod/pkg/vm"
	"github.com/vmpod/vmpod/pkg/vmspec"
)

type config struct {
	guestDir  string
	root      string
	cacheDir  string
	tap       string
	sizes     []int // MiB
	vcpus     []int
	noTHP     []int // MiB sizes to run again with THP off (1 vCPU)
	bootLimit time.Duration
	deadline  time.Duration
	samples   int
	jsonOut   string
	cmdline   string
}

func main() {
	// libvirt starts this binary, through the jailer link, as the VMs'
	// emulator: it is then the jailer, as vm-runtime is in a pod.
	if filepath.Base(os.Args[0]) == jail.EmulatorName {
		os.Exit(jail.Main(os.Args[1:]))
	}
	var c config
	var sizes, vcpus, noTHP string
	flag.StringVar(&c.guestDir, "guest-dir", "_output/guest", "test guest built by hack/guest/build.sh")
	flag.StringVar(&c.root, "root", "", "scratch dir for the libvirt root and VM files (required; removed by the caller)")
	flag.StringVar(&c.cacheDir, "capabilities-cache", "", "warm QEMU capabilities cache to share")
	flag.StringVar(&c.tap, "tap", "", "existing tap device for the guest NIC; empty: no NIC (vmpod.io/network: none)")
	flag.StringVar(&sizes, "sizes", "128,256,512,1024,2048", "guest RAM sizes in MiB")
	flag.StringVar(&vcpus, "vcpus", "1,2", "vCPU counts")
	flag.StringVar(&noTHP, "no-thp", "2048", "sizes (MiB) measured again, 1 vCPU, with transparent huge pages off for QEMU (PR_SET_THP_DISABLE)")
	flag.DurationVar(&c.bootLimit, "boot-timeout", 3*time.Minute, "per VM: create to ready")
	flag.DurationVar(&c.deadline, "deadline", 0, "start no new VM after this long (0: no limit); the runs left are reported as skipped")
	flag.IntVar(&c.samples, "samples", 3, "memory samples per VM, 1 s apart, after ready (the max is kept)")
	flag.StringVar(&c.jsonOut, "json", "", "also write the results here")
	flag.Float64Var(&shimMiB, "shim-mib", 8, "the shim's memory per pod, MiB, added to QEMU's: BenchmarkShimFootprint's shim PSS per pod (test/containerd, 7.7); the libvirt helper never runs beside a guest that used its RAM (docs/overhead.md)")
	flag.StringVar(&c.cmdline, "cmdline", "quiet init_on_free=1", "guest kernel command line (vmpod.io/kernel-cmdline)")
	flag.Parse()
	var err error
	if c.sizes, err = ints(sizes); err == nil {
		if c.vcpus, err = ints(vcpus); err == nil {
			c.noTHP, err = ints(noTHP)
		}
	}
	if err != nil || c.root == "" {
		fmt.Fprintln(os.Stderr, "overhead: want -root DIR and comma-separated integers:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "overhead:", err)
		os.Exit(1)
	}
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q: not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// result is one VM's measurement.
type result struct {
	GuestMiB int
	VCPUs    int
	THP      bool
	Boot     time.Duration // create -> "VMPOD-GUEST: ready"
	// Peak is the largest QEMUOverhead of any sample, during the boot
	// (every 250 ms) or after it.
	Peak uint64
	sample
}

// Worst is the VM's overhead in the worst case this run can tell: QEMU's
// peak overhead with a full translation buffer, plus the shim (-shim-mib).
func (r result) Worst() uint64 { return r.qemuWorst() + shimBytes() }

// shimMiB is -shim-mib. The shim has been its own small binary
// (cmd/containerd-shim-vmpod-v2) since this process stopped being a fair
// stand-in for it: this process carries the whole of hack/overhead and
// grows with every VM it runs (41-57 MiB RSS), the shim runs one VM and
// weighs 7.7 MiB PSS per pod without libvirt (BenchmarkShimFootprint); its
// libvirt helper runs only while no guest has used its RAM.
var shimMiB float64

func shimBytes() uint64 { return uint64(shimMiB * (1 << 20)) }

// qemuWorst is QEMU's part of Worst.
func (r result) qemuWorst() uint64 { return max(r.Peak, r.QEMUOverhead()) + r.TBUnfilled() }

func run(ctx context.Context, c config) error {
	guestDir, err := filepath.Abs(c.guestDir)
	if err != nil {
		return err
	}
	c.guestDir = guestDir
	img := vm.Image{
		Kernel: filepath.Join(c.guestDir, "vmlinux"), Initrd: filepath.Join(c.guestDir, "initrd.img"),
		Disk: filepath.Join(c.guestDir, "disk.qcow2"), DiskFormat: "qcow2",
	}
	for _, f := range []string{img.Kernel, img.Initrd, img.Disk} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("test guest: %w (run hack/guest/build.sh)", err)
		}
	}
	shimBefore := selfRSS()
	conn, err := libvirt.OpenEmbedded(ctx, filepath.Join(c.root, "libvirt"), libvirt.EmbedOptions{CacheDir: c.cacheDir})
	if err != nil {
		return err
	}
	defer conn.Close()
	kvm, err := node.CheckKVM(ctx, node.ProbeOptions{CacheFile: node.DefaultKVMCache})
	if err != nil {
		return err
	}
	h, err := node.Host(ctx, conn, kvm)
	if err != nil {
		return err
	}
	if !h.HasAccel(host.AccelTCG) {
		return errors.New("this QEMU has no TCG")
	}
	shimIdle := selfRSS()
	fmt.Printf("shim stand-in (this process): RSS %.1f MiB before opening libvirt, %.1f MiB with the embedded driver open\n",
		mib(shimBefore), mib(shimIdle))
	rt := vm.NewRuntime(conn)

	type run struct {
		mib, vcpus int
		thp        bool
	}
	var runs []run
	for _, m := range c.sizes {
		for _, v := range c.vcpus {
			runs = append(runs, run{m, v, true})
		}
	}
	for _, m := range c.noTHP {
		runs = append(runs, run{m, 1, false})
	}
	var results []result
	thpOff := false
	begin := time.Now()
	for i, r := range runs {
		if c.deadline > 0 && time.Since(begin) > c.deadline {
			fmt.Fprintf(os.Stderr, "deadline %v reached: skipping the %d runs left\n", c.deadline, len(runs)-i)
			break
		}
		if !r.thp && !thpOff {
			// Inherited by every QEMU libvirt forks from here on; it
			// overrides QEMU's madvise(MADV_HUGEPAGE) on guest RAM, as a
			// node with THP "never" would.
			if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetTHPDisable, 1, 0); errno != 0 {
				return fmt.Errorf("prctl(PR_SET_THP_DISABLE): %v", errno)
			}
			thpOff = true
		}
		fmt.Fprintf(os.Stderr, "[%d/%d] %d MiB, %d vCPU, THP %v ...", i+1, len(runs), r.mib, r.vcpus, onOff(r.thp))
		res, err := measure(ctx, c, rt, h, img, i, r.mib, r.vcpus)
		if err != nil {
			fmt.Fprintln(os.Stderr, " failed")
			return fmt.Errorf("%d MiB, %d vCPU: %w", r.mib, r.vcpus, err)
		}
		res.THP = r.thp
		fmt.Fprintf(os.Stderr, " ready in %v\n", res.Boot.Round(100*time.Millisecond))
		results = append(results, res)
	}
	report(os.Stdout, results, shimIdle)
	if c.jsonOut != "" {
		b, err := json.MarshalIndent(results, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(c.jsonOut, append(b, '\n'), 0o644)
	}
	return nil
}

const prSetTHPDisable = 41 // linux/prctl.h

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// measure boots one VM, waits for the guest to be ready, samples memory
// and removes the VM whatever happens.
func measure(ctx context.Context, c config, rt *vm.Runtime, h host.Host, img vm.Image, n, guestMiB, vcpus int) (_ result, retErr error) {
	ctx, cancel := context.WithTimeout(ctx, c.bootLimit+time.Duration(c.samples+30)*time.Second)
	defer cancel()
	spec, err := vmspec.FromPod(pod(guestMiB, vcpus, c.cmdline, c.tap != ""))
	if err != nil {
		return result{}, err
	}
	layout := vm.Layout{Dir: filepath.Join(c.root, fmt.Sprintf("vm%d", n))}
	// QEMU runs jailed, as in a pod: the overhead measured is a pod's.
	j, err := vm.LeaseJail(c.root, jail.DefaultRange, layout, 4<<30)
	if err != nil {
		return result{}, err
	}
	defer vm.ReleaseJail(c.root, layout)
	j.LibvirtRoot = filepath.Join(c.root, "libvirt") // one libvirt for all the VMs measured
	cfg := vm.Config{Spec: spec, Host: h, Image: img, Layout: layout, Jail: j}
	if c.tap != "" {
		cfg.NICs = map[string]convert.NIC{spec.NICs[0].Name: {Tap: c.tap, MAC: "0a:58:0a:f4:00:05"}}
	}
	start := time.Now()
	m, err := rt.Create(ctx, cfg)
	if err != nil {
		return result{}, err
	}
	defer func() {
		if err := m.Delete(context.WithoutCancel(ctx)); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("delete VM: %w", err))
		}
		os.RemoveAll(layout.Dir)
	}()
	if err := m.Start(ctx, nil); err != nil {
		return result{}, err
	}
	pid, err := m.PID(ctx)
	if err != nil {
		return result{}, err
	}
	// Sample during the boot too: TCG's soft TLBs grow while the guest
	// zeroes its memory and shrink again once it idles, so the peak is
	// only seen then.
	var res result
	var sampleErr error
	every := ticker(250 * time.Millisecond)
	bootCtx, bootCancel := context.WithTimeout(ctx, c.bootLimit)
	defer bootCancel()
	err = waitConsole(bootCtx, layout.ConsoleLog(), "VMPOD-GUEST: ready", func() {
		if every() {
			if s, err := takeSample(pid, spec.MemoryBytes); err == nil {
				res.Peak = max(res.Peak, s.bootOverhead())
			} else {
				sampleErr = err
			}
		}
	})
	if err != nil {
		return result{}, errors.Join(err, sampleErr)
	}
	res.GuestMiB, res.VCPUs, res.Boot = guestMiB, vcpus, time.Since(start)
	for i := 0; i < c.samples; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return result{}, ctx.Err()
			case <-time.After(time.Second):
			}
		}
		s, err := takeSample(pid, spec.MemoryBytes)
		if err != nil {
			return result{}, err
		}
		s.Shim = selfRSS()
		res.sample = res.sample.max(s)
		res.Peak = max(res.Peak, s.QEMUOverhead())
	}
	return res, m.Kill(ctx)
}

func pod(guestMiB, vcpus int, cmdline string, network bool) *corev1.Pod {
	rc := "vmpod"
	ann := map[string]string{vmspec.AnnotationKernelCmdline: cmdline}
	if !network {
		ann[vmspec.AnnotationNetwork] = "none"
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("ovh-%dm-%dc", guestMiB, vcpus), Namespace: "vmpod-overhead", Annotations: ann,
		},
		Spec: corev1.PodSpec{
			RuntimeClassName: &rc,
			Containers: []corev1.Container{{
				Name: "vm", Image: "localhost/vmpod/test-guest:v1",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
					corev1.ResourceCPU:    *resource.NewQuantity(int64(vcpus), resource.DecimalSI),
					corev1.ResourceMemory: *resource.NewQuantity(int64(guestMiB)<<20, resource.BinarySI),
				}},
			}},
		},
	}
}

// ticker returns a func that reports true at most once per period.
func ticker(period time.Duration) func() bool {
	var last time.Time
	return func() bool {
		if time.Since(last) < period {
			return false
		}
		last = time.Now()
		return true
	}
}

// waitConsole polls the serial log until a line holds marker, calling
// poll on every look.
func waitConsole(ctx context.Context, path, marker string, poll func()) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if data, err := os.ReadFile(path); err == nil && strings.Contains(string(data), marker) {
			return nil
		}
		poll()
		select {
		case <-ctx.Done():
			data, _ := os.ReadFile(path)
			tail := string(data)
			if len(tail) > 2000 {
				tail = tail[len(tail)-2000:]
			}
			return fmt.Errorf("no %q on the console: %w\n%s", marker, ctx.Err(), tail)
		case <-tick.C:
		}
	}
}
