package shim

import (
	"bytes"
	"testing"
)

// TestCRLFWriter: the serial line's CRLF becomes LF, also when the CR
// ends one write and the LF starts the next; a lone CR stays.
func TestCRLFWriter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []string
		want   string
	}{
		{"one write", []string{"a\r\nb\r\n"}, "a\nb\n"},
		{"split between CR and LF", []string{"a\r", "\nb\r", "\n"}, "a\nb\n"},
		{"lone CR kept", []string{"a\rb", "\r", "c"}, "a\rb\rc"},
		{"CR at the end, flushed", []string{"progress\r"}, "progress\r"},
		{"CR then an empty write", []string{"a\r", "", "\n"}, "a\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			w := &crlfWriter{w: &out}
			for _, s := range tc.writes {
				if n, err := w.Write([]byte(s)); err != nil || n != len(s) {
					t.Fatalf("Write(%q) = %d, %v", s, n, err)
				}
			}
			if err := w.flush(); err != nil {
				t.Fatal(err)
			}
			if got := out.String(); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
