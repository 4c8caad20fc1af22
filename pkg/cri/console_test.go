package cri

import (
	"bytes"
	"path/filepath"
	"testing"
)

func TestConsoleOutAttach(t *testing.T) {
	l, err := openCRILog(filepath.Join(t.TempDir(), "0.log"))
	if err != nil {
		t.Fatal(err)
	}
	o := newConsoleOut(l)
	o.Write([]byte("before\n")) // nobody attached: the log alone
	a, ok := o.attach()
	if !ok {
		t.Fatal("attach to an open console refused")
	}
	o.Write([]byte("one\n"))
	if got := <-a.out; string(got) != "one\n" {
		t.Errorf("attached client got %q, want one", got)
	}
	// A client that does not read misses output; the console never waits.
	for range attachBuffer + 10 {
		o.Write([]byte("x"))
	}
	if !o.takeDropped(a) || o.takeDropped(a) {
		t.Error("a client that fell behind is not told so exactly once")
	}
	o.close()
	var rest bytes.Buffer
	for b := range a.out {
		rest.Write(b)
	}
	if rest.Len() != attachBuffer {
		t.Errorf("client kept %d chunks, want the %d its buffer holds", rest.Len(), attachBuffer)
	}
	if _, ok := o.attach(); ok {
		t.Error("attach after the console ended accepted")
	}
	o.detach(a) // after close: no double close
}

func TestCapOutput(t *testing.T) {
	small := []byte("small")
	if got := capOutput(small); !bytes.Equal(got, small) {
		t.Errorf("capOutput(small) = %q", got)
	}
	big := bytes.Repeat([]byte("x"), maxExecSyncOutput+1)
	got := capOutput(big)
	if len(got) != maxExecSyncOutput || !bytes.HasSuffix(got, []byte("output cut at 4194304 bytes\n")) {
		t.Errorf("capOutput(big): %d bytes ending %q", len(got), got[len(got)-40:])
	}
}
