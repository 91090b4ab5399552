package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"seckill/internal/lock"
)

// invariantDoc is the page whose failures table the ledger covers.
const invariantDoc = "docs/INVARIANT.md"

// promise is one row the ledger must cover: its name, as a row's Promise
// starts it, and the tests the documentation cites for it.
type promise struct {
	name  string
	cites string
}

// promises reads the rows of INVARIANT.md's failures table and the rungs
// of the lock ladder (LOCKS.md is generated from lock's table).
func promises(root string) ([]promise, error) {
	b, err := os.ReadFile(filepath.Join(root, invariantDoc))
	if err != nil {
		return nil, err
	}
	_, table, found := strings.Cut(string(b), "\n## The failures\n")
	if !found {
		return nil, fmt.Errorf("%s: no section \"The failures\"", invariantDoc)
	}
	table, _, _ = strings.Cut(table, "\n## ")
	var out []promise
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| failure |") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		out = append(out, promise{name: cells[0], cites: cells[len(cells)-1]})
	}
	for _, s := range lock.Strategies() {
		out = append(out, promise{name: rungPrefix + s.Name, cites: "`" + s.Test + "`"})
	}
	return out, nil
}

// rungPrefix starts the Promise of a row that covers a rung of the ladder.
const rungPrefix = "rung "

// checkCoverage fails unless every promise is covered by a row, or said
// uncovered (with why), and every row's test is one the promise cites:
// the documentation must name a test that fails without its promise.
func checkCoverage(root string, rows []Mutation, out io.Writer) error {
	ps, err := promises(root)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range ps {
		var n int
		for _, m := range rows {
			if !covers(m, p) {
				continue
			}
			n++
			if !strings.Contains(p.cites, "`"+topLevel(m.Run)+"`") && !strings.Contains(p.cites, "`"+topLevel(m.Run)+"/") {
				errs = append(errs, fmt.Errorf("%s: its test %s is not one %q cites", m.Name, topLevel(m.Run), p.name))
			}
		}
		for _, u := range uncovered {
			if strings.HasPrefix(p.name, u.Promise) {
				fmt.Fprintf(out, "uncovered: %q: %s\n", u.Promise, u.Why)
				n++
			}
		}
		if n == 0 {
			errs = append(errs, fmt.Errorf("%q has no mutation in the ledger", p.name))
		}
	}
	for _, m := range rows {
		if !slices.ContainsFunc(ps, func(p promise) bool { return covers(m, p) }) {
			errs = append(errs, fmt.Errorf("%s: no promise starts with %q", m.Name, m.Promise))
		}
	}
	return errors.Join(errs...)
}

func covers(m Mutation, p promise) bool {
	if strings.HasPrefix(m.Promise, rungPrefix) {
		return m.Promise == p.name
	}
	return strings.HasPrefix(p.name, m.Promise)
}
