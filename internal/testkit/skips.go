// This file keeps what a package's tests skipped for want of a server or a
// tool, and says it in one line when they end. go test without -v shows a
// passing package as its ok line alone, so a machine with only Go would
// not know what it left untested.

package testkit

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// What a bare machine lacks, as Skip names it: the summary groups its
// tests by these.
const (
	NoRedisServer = "redis-server"
	NoMySQL       = "MySQL"
	NoMariaDB     = "mariadbd"
	NoRabbitMQ    = "RabbitMQ"
	NoNginx       = "nginx"
	NoChromium    = "Chromium"
	NoEtcd        = "etcd"
	NoGo          = "the go command"
)

var skipped struct {
	sync.Mutex
	absent []string            // in the order first met
	tests  map[string][]string // absent → the tests skipped for it
}

// Skip skips tb because absent (NoRedisServer, NoMySQL, …) is not on this
// machine, with why in the test's log, and counts it in the line Summarize
// prints. A skip of the test's own choosing (-short) stays tb.Skip.
func Skip(tb testing.TB, absent, why string) {
	tb.Helper()
	skipped.Lock()
	if skipped.tests == nil {
		skipped.tests = map[string][]string{}
	}
	if _, ok := skipped.tests[absent]; !ok {
		skipped.absent = append(skipped.absent, absent)
	}
	skipped.tests[absent] = append(skipped.tests[absent], tb.Name())
	skipped.Unlock()
	tb.Skip(why)
}

// Skipf is Skip with a formatted reason.
func Skipf(tb testing.TB, absent, format string, args ...any) {
	tb.Helper()
	Skip(tb, absent, fmt.Sprintf(format, args...))
}

// Summarize returns run followed by one line naming the tests Skip skipped
// and why, if any did: for a package's TestMain,
//
//	func TestMain(m *testing.M) { os.Exit(testkit.Summarize(m.Run)()) }
//
// go test keeps a passing package's output to itself unless -v, so
// without -v the line goes to the terminal go test runs in (/dev/tty),
// where there is one; with -v, or when the package failed, to stdout, which
// go test then shows.
func Summarize(run func() int) func() int {
	return func() int {
		code := run()
		if line := skipLine(packageName()); line != "" {
			printSkips(line, code != 0 || testing.Verbose())
		}
		return code
	}
}

func printSkips(line string, shown bool) {
	var w io.Writer = os.Stdout
	if !shown {
		if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
			defer tty.Close()
			w = tty
		}
	}
	fmt.Fprintln(w, line)
}

// namedSkips is how many tests the summary names for each thing absent,
// so that it stays one line; -v lists every skip.
const namedSkips = 4

// skipLine is "pkg: skipped 3 tests: redis-server absent (TestA, TestB);
// RabbitMQ absent (TestMQ)", or "" when Skip skipped nothing.
func skipLine(pkg string) string {
	skipped.Lock()
	defer skipped.Unlock()
	n := 0
	var parts []string
	for _, a := range skipped.absent {
		ts := skipped.tests[a]
		n += len(ts)
		names := strings.Join(ts[:min(len(ts), namedSkips)], ", ")
		if len(ts) > namedSkips {
			names += fmt.Sprintf(" and %d more", len(ts)-namedSkips)
		}
		parts = append(parts, fmt.Sprintf("%s absent (%s)", a, names))
	}
	if n == 0 {
		return ""
	}
	tests := "tests"
	if n == 1 {
		tests = "test"
	}
	return fmt.Sprintf("%s: skipped %d %s: %s", pkg, n, tests, strings.Join(parts, "; "))
}

// packageName is the package's directory relative to its module's root:
// go test runs a package's tests in its directory.
func packageName() string {
	wd, err := os.Getwd()
	if err != nil {
		return "?"
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if rel, err := filepath.Rel(dir, wd); err == nil && rel != "." {
				return filepath.ToSlash(rel)
			}
			return filepath.Base(wd)
		}
		if filepath.Dir(dir) == dir {
			return filepath.Base(wd)
		}
	}
}
