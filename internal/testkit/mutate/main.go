// Command mutate runs the promise ledger: for each promise of
// docs/INVARIANT.md and each rung of the lock ladder (docs/LOCKS.md), a
// mutation that breaks it, and the test that must fail under it. It copies
// the tree to scratch directories, applies each mutation in turn, runs only
// the named test, and fails if a mutation survives (the test passes), if a
// mutation's text is not found exactly once, or if a promise has no row.
//
//	go run ./internal/testkit/mutate            # every row
//	go run ./internal/testkit/mutate -run fence # the rows whose name matches
//	go run ./internal/testkit/mutate -check     # coverage and citations only
//
// Run it from the module's root. A row that needs a real server (Needs)
// is skipped, and says so, when its variable is not set.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"time"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fl := flag.NewFlagSet("mutate", flag.ContinueOnError)
	only := fl.String("run", "", "run only the rows whose name matches this regexp")
	jobs := fl.Int("j", min(2, runtime.NumCPU()), "rows run at once, each in its own copy of the tree")
	check := fl.Bool("check", false, "check coverage and citations only, run nothing")
	timeout := fl.Duration("timeout", 10*time.Minute, "a row's go test -timeout")
	if err := fl.Parse(args); err != nil {
		return err
	}
	rows, err := select_(ledger, *only)
	if err != nil {
		return err
	}
	// Coverage is the whole ledger's: a run of some rows only reports it.
	if err := checkCoverage(".", ledger, out); err != nil {
		if *only == "" || *check {
			return err
		}
		fmt.Fprintf(out, "the ledger is incomplete:\n%v\n", err)
	}
	if err := checkFinds(".", rows); err != nil {
		return err
	}
	if *check {
		fmt.Fprintf(out, "%d rows: every promise has a mutation, every mutation finds its text once\n", len(ledger))
		return nil
	}
	return runRows(ctx, rows, *jobs, *timeout, out)
}

func select_(rows []Mutation, pattern string) ([]Mutation, error) {
	if pattern == "" {
		return rows, nil
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, fmt.Errorf("-run: %w", err)
	}
	var out []Mutation
	for _, m := range rows {
		if re.MatchString(m.Name) {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-run %q matches no row", pattern)
	}
	return out, nil
}

// checkFinds fails unless each row's text is in its file exactly once: a
// mutation whose code moved must be rewritten, not silently skipped.
func checkFinds(root string, rows []Mutation) error {
	var errs []error
	for _, m := range rows {
		b, err := os.ReadFile(filepath.Join(root, m.File))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.Name, err))
			continue
		}
		if n := bytes.Count(b, []byte(m.Find)); n != 1 {
			errs = append(errs, fmt.Errorf("%s: %q is in %s %d times, want once", m.Name, m.Find, m.File, n))
		}
	}
	return errors.Join(errs...)
}

// outcome is what a row's run came to.
type outcome struct {
	m       Mutation
	killed  bool
	skipped string // why the row did not run
	err     error  // the run could not tell (a build failure, no test ran)
	took    time.Duration
	output  string
}

func runRows(ctx context.Context, rows []Mutation, jobs int, timeout time.Duration, out io.Writer) error {
	start := time.Now()
	todo := make(chan Mutation)
	results := make(chan outcome)
	var wg sync.WaitGroup
	for range max(1, jobs) {
		dir, err := os.MkdirTemp("", "seckill-mutate-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if err := copyTree(".", dir); err != nil {
			return fmt.Errorf("copying the tree: %w", err)
		}
		wg.Go(func() {
			for m := range todo {
				results <- runRow(ctx, dir, m, timeout)
			}
		})
	}
	go func() {
		for _, m := range rows {
			todo <- m
		}
		close(todo)
		wg.Wait()
		close(results)
	}()
	var killed, skipped int
	var bad []string
	for r := range results {
		switch {
		case r.err != nil:
			fmt.Fprintf(out, "ERROR    %-40s %v\n%s\n", r.m.Name, r.err, indent(r.output))
			bad = append(bad, r.m.Name)
		case r.skipped != "":
			fmt.Fprintf(out, "skipped  %-40s %s\n", r.m.Name, r.skipped)
			skipped++
		case r.killed:
			fmt.Fprintf(out, "killed   %-40s %5.1fs  %s -run '%s'\n", r.m.Name, r.took.Seconds(), r.m.Pkg, r.m.Run)
			killed++
		default:
			fmt.Fprintf(out, "SURVIVED %-40s %s -run '%s' passes with %s changed\n", r.m.Name, r.m.Pkg, r.m.Run, r.m.File)
			bad = append(bad, r.m.Name)
		}
	}
	fmt.Fprintf(out, "%d rows: %d killed, %d skipped, %d survived or failed to run, in %s\n",
		len(rows), killed, skipped, len(bad), time.Since(start).Round(time.Second))
	if len(bad) > 0 {
		return fmt.Errorf("not killed: %s", strings.Join(bad, ", "))
	}
	return nil
}

// runRow applies m in dir, runs its test, and puts the file back.
func runRow(ctx context.Context, dir string, m Mutation, timeout time.Duration) outcome {
	r := outcome{m: m}
	for _, v := range m.Needs {
		if os.Getenv(v) == "" {
			r.skipped = v + " is not set"
			return r
		}
	}
	path := filepath.Join(dir, m.File)
	orig, err := os.ReadFile(path)
	if err != nil {
		r.err = err
		return r
	}
	if err := os.WriteFile(path, bytes.Replace(orig, []byte(m.Find), []byte(m.Replace), 1), 0o644); err != nil {
		r.err = err
		return r
	}
	defer os.WriteFile(path, orig, 0o644)
	if m.Timeout > 0 {
		timeout = m.Timeout
	}
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-v", "-timeout", timeout.String(), "-run", m.Run, m.Pkg)
	cmd.Dir = dir
	b, err := cmd.CombinedOutput()
	r.took, r.output = time.Since(start), string(b)
	var exit *exec.ExitError
	switch {
	case err == nil && strings.Contains(r.output, "no tests to run"):
		r.err = errors.New("no test matches -run")
	case err == nil && strings.Contains(r.output, "--- SKIP: "+topLevel(m.Run)+" ("):
		r.err = errors.New("the test skipped: it proves nothing here")
	case err == nil:
	case !errors.As(err, &exit):
		r.err = err
	case strings.Contains(r.output, "panic: test timed out"):
		r.err = errors.New("the test timed out: a hang is not a failing assertion")
	case strings.Contains(r.output, "--- FAIL:") || strings.Contains(r.output, "panic:"):
		r.killed = true
	default:
		r.err = fmt.Errorf("go test failed without a failing test (the mutation does not build?): %w", err)
	}
	return r
}

// topLevel is the top-level test a -run pattern names.
func topLevel(run string) string {
	top, _, _ := strings.Cut(run, "/")
	return strings.Trim(top, "^$")
}

func indent(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return "    " + strings.Join(lines, "\n    ")
}

// copyTree copies the module's files, without .git, into dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		target := filepath.Join(dst, path)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, info.Mode().Perm())
	})
}
