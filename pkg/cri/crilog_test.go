package cri

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestCRILogFormat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c", "0.log")
	l, err := openCRILog(path)
	if err != nil {
		t.Fatal(err)
	}
	l.now = func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC) }
	long := strings.Repeat("x", maxLogLine+3)
	// Console output arrives in arbitrary pieces, with \r\n line ends.
	for _, w := range []string{"VMPOD-GUEST: in", "it\r\n", "a\r\nb\n", long, "\r\n", "tail without newline"} {
		if _, err := l.Write([]byte(w)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ts := "2026-01-02T03:04:05.000000006Z"
	want := []string{
		ts + " stdout F VMPOD-GUEST: init",
		ts + " stdout F a",
		ts + " stdout F b",
		ts + " stdout P " + long[:maxLogLine],
		ts + " stdout F xxx",
		ts + " stdout F tail without newline",
		"",
	}
	if diff := cmp.Diff(want, strings.Split(string(b), "\n")); diff != "" {
		t.Errorf("CRI log (-want +got):\n%s", diff)
	}
}
