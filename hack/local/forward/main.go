// Command forward makes the local cluster's kube-apiserver, which listens
// on the loopback of the node's network namespace, reachable on the host's
// loopback: each connection accepted on -listen is dialled to -target from
// inside the namespace -netns. Nothing but loopback addresses is used, so
// no packet leaves either namespace. hack/local-up.sh runs it.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:16443", "host loopback address to listen on")
	netns := flag.String("netns", "", "network namespace file, e.g. /run/netns/vmpod-local")
	target := flag.String("target", "127.0.0.1:6443", "address to dial inside -netns")
	flag.Parse()
	if *netns == "" {
		log.Fatal("forward: -netns is required")
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("forward: %v", err)
	}
	for {
		c, err := l.Accept()
		if err != nil {
			log.Fatalf("forward: %v", err)
		}
		go serve(c, *netns, *target)
	}
}

func serve(c net.Conn, netns, target string) {
	defer c.Close()
	up, err := dialIn(netns, target)
	if err != nil {
		log.Printf("forward: %v", err)
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, c); up.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	go func() { io.Copy(c, up); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	<-done
	<-done
}

// dialIn dials from inside netns. A socket belongs to the namespace of the
// thread that creates it, so the dial runs on a locked thread moved into
// netns; that thread is never unlocked, so the runtime discards it rather
// than reuse it in the wrong namespace.
func dialIn(netns, target string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(netns)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("setns %s: %w", netns, err)}
			return
		}
		c, err := net.Dial("tcp", target)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}
