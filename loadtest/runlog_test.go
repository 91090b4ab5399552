package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"seckill/internal/testkit/testenv"
)

// The run's log counts its lines by kind, a line split across writes
// counted once.
func TestRunLogCountsItsLines(t *testing.T) {
	var out bytes.Buffer
	l := &runLog{w: &out}
	for _, w := range []string{
		"time=1 level=WARN msg=\"the consumer cannot", " read its queue\"\n",
		"time=2 level=ERROR msg=x\ntime=3 level=INFO msg=y\n",
		"redis: pool.go:770: connection pool: failed to dial\n",
	} {
		if _, err := l.Write([]byte(w)); err != nil {
			t.Fatal(err)
		}
	}
	if l.lines != 4 || l.warns != 1 || l.errors != 1 || l.pool != 1 {
		t.Errorf("counted %d lines, %d WARN, %d ERROR, %d go-redis; want 4, 1, 1, 1", l.lines, l.warns, l.errors, l.pool)
	}
	if !strings.HasSuffix(out.String(), "failed to dial\n") {
		t.Errorf("the log holds %q", out.String())
	}
}

// A scenario that pauses its Redis makes the instances and go-redis log:
// those lines go to the run's log file, not the terminal, which says in one
// line how many and where (issue 41: -scenario failover printed 90 go-redis
// lines of 105).
func TestRunLogsGoToTheirFile(t *testing.T) {
	product := testenv.ProductID(t)
	path := filepath.Join(t.TempDir(), "run.log")
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"loadtest", "-scenario", "redis-pause", "-log", path, "-product", strconv.FormatInt(product, 10)},
		backends(t, product, 2), strings.NewReader(""), &stdout, &stderr)
	if err != nil {
		t.Fatalf("the scenario: %v\n%s", err, stderr.String())
	}
	for line := range strings.Lines(stderr.String() + stdout.String()) {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") || strings.HasPrefix(line, "redis: ") {
			t.Errorf("a log line on the terminal: %q", line)
		}
	}
	logged, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := strings.Count(string(logged), "\n")
	if n == 0 {
		t.Fatal("the run's log is empty: a Redis paused mid-run logs nothing?")
	}
	want := "the services' and libraries' log: " + strconv.Itoa(n) + " lines"
	if !strings.Contains(stderr.String(), want) || !strings.Contains(stderr.String(), path) {
		t.Errorf("stderr does not say %q and %s:\n%s", want, path, stderr.String())
	}
}
