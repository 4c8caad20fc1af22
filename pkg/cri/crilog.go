package cri

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// maxLogLine is the longest line written as one CRI log entry; a longer
// one is split into partial ("P") entries, as containerd does with its
// default max_container_log_line_size.
const maxLogLine = 16 << 10

// criLog turns the guest's serial console into the kubelet's container
// log format, one entry per line:
//
//	2026-01-02T15:04:05.999999999Z stdout F <line>
//
// A serial console ends lines with \r\n; the \r goes. Writes never fail
// towards the console: a log that cannot be written loses lines, not the
// VM.
type criLog struct {
	mu      sync.Mutex
	path    string
	f       *os.File
	partial []byte
	now     func() time.Time
}

func openCRILog(path string) (*criLog, error) {
	l := &criLog{path: path, now: time.Now}
	if path == "" {
		return l, nil
	}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *criLog) open() error {
	if err := os.MkdirAll(filepath.Dir(l.path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	l.f = f
	return nil
}

// Write takes console output; whole lines become entries at once.
func (l *criLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.partial = append(l.partial, p...)
			for len(l.partial) >= maxLogLine {
				l.entry('P', l.partial[:maxLogLine])
				l.partial = append(l.partial[:0], l.partial[maxLogLine:]...)
			}
			break
		}
		line := append(l.partial, p[:i]...)
		l.partial = l.partial[:0]
		l.entry('F', bytes.TrimSuffix(line, []byte{'\r'}))
		p = p[i+1:]
	}
	return n, nil
}

func (l *criLog) entry(tag byte, line []byte) {
	if l.f == nil {
		return
	}
	var b bytes.Buffer
	b.WriteString(l.now().Format(time.RFC3339Nano))
	b.WriteString(" stdout ")
	b.WriteByte(tag)
	b.WriteByte(' ')
	b.Write(line)
	b.WriteByte('\n')
	_, _ = l.f.Write(b.Bytes())
}

// Reopen starts a new file at the path (the kubelet rotated the old one).
func (l *criLog) Reopen() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.path == "" {
		return nil
	}
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
	return l.open()
}

// Close writes what is left of the last line and closes the file.
func (l *criLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.partial) > 0 {
		l.entry('F', bytes.TrimSuffix(l.partial, []byte{'\r'}))
		l.partial = nil
	}
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
