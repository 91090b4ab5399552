package lock

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"seckill/internal/testkit"
)

var update = flag.Bool("update", false, "rewrite docs/LOCKS.md from the strategies table")

const locksDoc = "../../docs/LOCKS.md"

// handWritten marks where docs/LOCKS.md stops being generated.
const handWritten = "<!-- Written by hand from here on; -update keeps it. -->"

// renderLocksDoc writes the ladder as markdown: docs/LOCKS.md is this text,
// so the documentation cannot drift from the table the code runs.
func renderLocksDoc() []byte {
	var b bytes.Buffer
	b.WriteString(`# The lock ladder

<!-- Generated from the strategies table in internal/lock/registry.go by
go test ./internal/lock -run TestLocksDoc -update. Edit the table, not this file. -->

Every strategy the service can lock with, from the naive to the robust, in
teaching order. Each rung fixes a flaw of the rungs before it and has one of
its own; the test named under it makes that flaw happen, on the servers
REDIS_ADDR and MYSQL_DSN name or, without them, on stand-ins the test starts.
The promise ledger (go run ./internal/testkit/mutate) checks that it does: a
mutation that takes each rung's flaw away (or, for the safe rungs, breaks what
keeps them safe) must make the rung's test fail. The API's "lock" field takes
the name.

`)
	for i, s := range Strategies() {
		fmt.Fprintf(&b, "%d. [`%s`](#%s): %s\n", i+1, s.Name, s.Name, s.Summary)
	}
	for _, s := range Strategies() {
		fmt.Fprintf(&b, "\n## %s\n\n", s.Name)
		fmt.Fprintf(&b, "**Fixes.** %s\n\n", s.Fixes)
		fmt.Fprintf(&b, "**Breaks.** %s\n\n", s.Breaks)
		if len(s.Commands) == 0 {
			b.WriteString("**Commands.** None: it never leaves the process.\n\n")
		} else {
			b.WriteString("**Commands**, one round trip each:\n\n")
			for _, c := range s.Commands {
				fmt.Fprintf(&b, "- `%s`\n", c)
			}
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "**Shown by** `go test -race ./internal/lock -run '%s'`\n", runPattern(s.Test))
	}
	return b.Bytes()
}

// runPattern anchors each level of a test name, so that -run picks out
// exactly that test.
func runPattern(test string) string {
	parts := strings.Split(test, "/")
	for i, p := range parts {
		parts[i] = "^" + p + "$"
	}
	return strings.Join(parts, "/")
}

func TestLocksDoc(t *testing.T) {
	tests := testkit.TestFuncs(t, ".")
	for _, s := range Strategies() {
		if s.Summary == "" || s.Fixes == "" || s.Breaks == "" || s.Commands == nil || s.Test == "" {
			t.Errorf("%s: Summary, Fixes, Breaks, Commands and Test must all be filled", s.Name)
		}
		if fn, _, _ := strings.Cut(s.Test, "/"); s.Test != "" && !tests[fn] {
			t.Errorf("%s: Test %q: no such test function in this package", s.Name, s.Test)
		}
	}

	want, err := os.ReadFile(locksDoc)
	if err != nil && !*update {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	got := renderLocksDoc()
	// What follows the marker is written by hand (the lessons beyond the
	// ladder's rungs), and kept as it is.
	if i := bytes.Index(want, []byte(handWritten)); i >= 0 {
		got = append(got, want[i-1:]...)
	}
	if *update {
		if err := os.WriteFile(locksDoc, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("docs/LOCKS.md is stale; run go test ./internal/lock -run TestLocksDoc -update (-file +table):\n%s", diff)
	}
}
