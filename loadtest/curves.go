package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"seckill/internal/lab/harness"
)

// The curves scenario (issue 22, item 4): req/s and p99 against the shards
// of a product, on one instance, and against the instances sharing one
// Redis and one database. -html draws them; the cluster scenario draws the
// masters.
var (
	curveShards    = []int{1, 2, 4, 8, 16, 32}
	curveInstances = []int{1, 2, 3, 4}
	// curveKinds are the runs along the shards: a lock held 1 ms, which
	// one shard serializes and more shards run side by side, and the
	// lock-free script, which shards do not serialize at all.
	curveKinds = []harness.Spec{
		{Lock: "token", Mode: "rmw", Hold: harness.Duration(time.Millisecond)},
		{Lock: "none", Mode: "lua"},
	}
	// curveAcross is the run along the instances: the lock-free script on
	// the service's default shards.
	curveAcross = harness.Spec{Lock: "none", Mode: "lua"}
)

// curvesDefault are the workload's sizes unless -buyers, -stock or
// -concurrency say otherwise: a unit for every buyer, so that every
// request takes one.
const curvesDefault = 2_000

func curvesBench(ctx context.Context, o options, getenv func(string) string, stdout, stderr io.Writer) error {
	if o.targets != "" {
		return fmt.Errorf("-scenario curves starts 1 to %d instances of its own: it takes no -target", curveInstances[len(curveInstances)-1])
	}
	cfg, err := serviceConfig(getenv, o.lockTTL, o.lockWait, o.spec.AdminToken)
	if err != nil {
		return err
	}
	if !o.set["buyers"] {
		o.spec.Buyers = curvesDefault
	}
	if !o.set["stock"] {
		o.spec.Stock = o.spec.Buyers
	}
	o.pickProducts(stderr)
	rep := harness.Report{Title: "seckill load test: scenario curves", Started: time.Now().UTC()}
	bar := newProgressBar(stderr)
	run := func(targets []string, s harness.Spec) error {
		spec := o.spec
		spec.Targets, spec.Lock, spec.Mode, spec.Hold, spec.Shards = targets, s.Lock, s.Mode, s.Hold, s.Shards
		spec.ProductID = o.spec.ProductID + int64(len(rep.Rows))
		row, err := harness.Run(ctx, spec, func(p harness.Progress) { bar.update(fmt.Sprintf("%s/%s ×%d", s.Lock, s.Mode, len(targets)), p) })
		bar.finish()
		if row.Strategy != "" {
			rep.Rows = append(rep.Rows, row)
		}
		if err != nil && !errors.Is(err, harness.ErrRejected) {
			return fmt.Errorf("run %s/%s on %d shards, %d instances: %w", s.Lock, s.Mode, s.Shards, len(targets), err)
		}
		return nil
	}
	err = func() error {
		for _, k := range curveInstances {
			fmt.Fprintf(stderr, "starting %d service instance(s)…\n", k)
			c, err := startCluster(ctx, k, clusterNeeds{}, cfg, stderr)
			if err != nil {
				return err
			}
			err = curvesOn(c.URLs, o.repeat, run, k == 1)
			if rep.Machine.CPU == "" {
				rep.Machine = harness.DetectMachine(ctx, harness.NewClient(1), c.URLs)
			}
			if serr := c.stop(); serr != nil {
				fmt.Fprintln(stderr, "loadtest: stopping the instances:", serr)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}()
	rep.Summary = curveLines(rep.Curves())
	return o.conclude(rep, err, nil, stdout)
}

// curvesOn runs, on targets, the run along the instances and, when
// shards, every kind along the shards; each repeat times.
func curvesOn(targets []string, repeat int, run func([]string, harness.Spec) error, shards bool) error {
	for range repeat {
		if err := run(targets, curveAcross); err != nil {
			return err
		}
		if !shards {
			continue
		}
		for _, kind := range curveKinds {
			for _, n := range curveShards {
				kind.Shards = n
				if err := run(targets, kind); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// curveLines are the curves as text: each series' req/s and p99 at each
// value, and its last value's req/s over its first's.
func curveLines(curves []harness.Curve) []string {
	var lines []string
	for _, c := range curves {
		for _, s := range c.Series {
			var pts []string
			for _, p := range s.Points {
				pts = append(pts, fmt.Sprintf("%d → %.0f req/s, p99 %.1f ms", p.X, p.RPS, p.P99MS))
			}
			first, last := s.Points[0], s.Points[len(s.Points)-1]
			lines = append(lines, fmt.Sprintf("against %s, %s: %s; %d ÷ %d = %.2f×",
				c.X, s.Label, strings.Join(pts, "; "), last.X, first.X, last.RPS/first.RPS))
		}
	}
	return lines
}
