package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"sync"

	"github.com/redis/go-redis/v9"
)

// runLog is where a run's logs go that are not its report: the in-process
// service's, its children's (the instances, their Redis), and go-redis's
// own (a pool that fails to dial prints a line per attempt). A scenario
// that kills a server makes thousands of them, and on the terminal they
// bury the verdict: so they go to a file, counted, and the run ends with
// one line saying how many of each and where (-log).
type runLog struct {
	mu                         sync.Mutex
	w                          io.Writer
	f                          *os.File // nil: w is the terminal (-log -)
	line                       []byte   // the line under way, its head
	lines, errors, warns, pool int
}

// maxHead is how much of a line is kept to classify it.
const maxHead = 256

// openRunLog opens path for the run's logs: "" a new file in the temporary
// directory, "-" the terminal (stderr).
func openRunLog(path string, stderr io.Writer) (*runLog, error) {
	switch path {
	case "-":
		return &runLog{w: stderr}, nil
	case "":
		f, err := os.CreateTemp("", "seckill-loadtest-*.log")
		if err != nil {
			return nil, fmt.Errorf("creating the run's log: %w", err)
		}
		return &runLog{w: f, f: f}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("creating the run's log: %w", err)
	}
	return &runLog{w: f, f: f}, nil
}

func (l *runLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for rest := p; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			l.head(rest)
			break
		}
		l.head(rest[:i])
		l.count()
		rest = rest[i+1:]
	}
	return l.w.Write(p)
}

func (l *runLog) head(b []byte) {
	if n := maxHead - len(l.line); n > 0 {
		l.line = append(l.line, b[:min(n, len(b))]...)
	}
}

// count classifies the line just ended: the service's slog levels
// (level=ERROR, level=WARN) and go-redis's own lines ("redis: ").
func (l *runLog) count() {
	l.lines++
	switch {
	case bytes.Contains(l.line, []byte("level=ERROR")):
		l.errors++
	case bytes.Contains(l.line, []byte("level=WARN")):
		l.warns++
	case bytes.HasPrefix(l.line, []byte("redis: ")):
		l.pool++
	}
	l.line = l.line[:0]
}

// Printf is go-redis's logger (redis.SetLogger).
func (l *runLog) Printf(_ context.Context, format string, v ...any) {
	fmt.Fprintf(l, "redis: "+format+"\n", v...)
}

// close ends the log and says on stderr what it holds and where; an empty
// file is removed and not named.
func (l *runLog) close(stderr io.Writer) {
	if l.f == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.f.Close()
	if l.lines == 0 {
		os.Remove(l.f.Name())
		return
	}
	fmt.Fprintf(stderr, "the services' and libraries' log: %d lines (%d ERROR, %d WARN, %d from go-redis) in %s (-log - shows them here)\n",
		l.lines, l.errors, l.warns, l.pool, l.f.Name())
}

// logsOf is where a part of the run that was handed stderr writes its
// logs: the run's log when run made one, else stderr itself.
func logsOf(stderr io.Writer) io.Writer {
	if s, ok := stderr.(*syncWriter); ok && s.logs != nil {
		return s.logs
	}
	return stderr
}

// redirectRedisLog sends go-redis's own log to l until the returned func
// restores the default.
func redirectRedisLog(l *runLog) (restore func()) {
	redis.SetLogger(l)
	return func() { redis.SetLogger(stderrRedisLog{log.New(os.Stderr, "redis: ", log.LstdFlags)}) }
}

// stderrRedisLog is go-redis's default: its lines on stderr.
type stderrRedisLog struct{ l *log.Logger }

func (s stderrRedisLog) Printf(_ context.Context, format string, v ...any) { s.l.Printf(format, v...) }
