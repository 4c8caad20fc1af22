// Command pause is the process that holds a pod sandbox's namespaces for the
// runc runtime in vmpod's containerd tests. vmpod builds it itself (static,
// CGO_ENABLED=0) and packages it with hack/pause/build.sh, so no test ever
// pulls an image.
//
// It blocks until SIGTERM or SIGINT and then exits 0. As PID 1 of a pod's PID
// namespace it also reaps the zombies that orphaned processes leave behind.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		os.Stdout.WriteString("vmpod pause\n")
		return
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	pid1 := os.Getpid() == 1
	if pid1 {
		reap() // children that died before Notify took over SIGCHLD
	}
	for s := range sigs {
		switch s {
		case syscall.SIGTERM, syscall.SIGINT:
			os.Exit(0)
		case syscall.SIGCHLD:
			if pid1 {
				reap()
			}
		}
	}
}

// reap collects every exited child; SIGCHLD is not queued, so one signal may
// stand for several exits.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
