package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/api"
	"seckill/internal/embedded"
	"seckill/internal/lab/experiment"
	"seckill/internal/testkit/child"
)

// lockDrill is a scenario whose fault lies below the service's HTTP API (a
// node's clock): it drives the locks and the stock code directly, on
// servers it starts, and prints one verdict row per variant. Its row in
// the experiments table (kind drill, the same Name) says what it shows.
type lockDrill struct {
	Name string
	// Summary is the table's, filled in by lookupDrill.
	Summary string
	// Variants are run in order; each says the verdict it must reach.
	Variants []drillVariant
}

type drillVariant struct {
	Name string
	Want string
	Run  func(ctx context.Context, env *drillEnv) (Outcome, error)
}

var lockDrills = []lockDrill{{
	Name: "clock-jump",
	Variants: []drillVariant{
		clockJumpVariant("5 nodes, clocks steady", 5, false, false, api.VerdictOK),
		clockJumpVariant("5 nodes, one clock jumps", 5, true, false, api.VerdictOversold),
		clockJumpVariant("7 nodes, one clock jumps", 7, true, false, api.VerdictOversold),
		clockJumpVariant("5 nodes, one jumps, fenced", 5, true, true, api.VerdictOK),
	},
}}

func clockJumpVariant(name string, nodes int, jump, fence bool, want string) drillVariant {
	return drillVariant{Name: name, Want: want, Run: func(ctx context.Context, env *drillEnv) (Outcome, error) {
		jumper, err := embedded.StartRedis()
		if err != nil {
			return Outcome{}, err
		}
		defer jumper.Close()
		c := ClockJump{StoreAddr: env.store, Fence: fence, Nodes: []*redis.Client{redis.NewClient(&redis.Options{Addr: jumper.Addr()})}}
		for _, addr := range env.nodes[:nodes-1] {
			c.Nodes = append(c.Nodes, redis.NewClient(&redis.Options{Addr: addr}))
		}
		defer func() {
			for _, n := range c.Nodes {
				n.Close()
			}
		}()
		if jump {
			c.Jump = jumper.JumpClock
		}
		return c.Run(ctx, name)
	}}
}

// lookupDrill returns the drill of the table's drill row named name, with
// the row's summary; nil when name is no drill.
func lookupDrill(name string) *lockDrill {
	e, ok := experiment.Lookup(name)
	if !ok || e.Kind != experiment.Drill {
		return nil
	}
	i := slices.IndexFunc(lockDrills, func(d lockDrill) bool { return d.Name == name })
	if i < 0 {
		return nil // TestEveryExperimentDispatches names the row
	}
	d := lockDrills[i]
	d.Summary = e.Summary
	return &d
}

// drillEnv is the servers a drill runs on: a store for the stock and
// independent Redis nodes for the locks.
type drillEnv struct {
	store string
	nodes []string
}

// startDrillEnv starts what the drill needs: the stock on REDIS_ADDR when
// set, else on a Redis of its own, and six lock nodes of its own (the
// seventh of the largest variant is the embedded one whose clock jumps).
func startDrillEnv(ctx context.Context, getenv func(string) string, stderr io.Writer) (*drillEnv, func(), error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("finding this binary: %w", err)
	}
	dir, err := os.MkdirTemp("", "seckill-drill-")
	if err != nil {
		return nil, nil, err
	}
	var procs []*child.Redis
	stop := func() {
		for _, p := range procs {
			p.Kill()
		}
		os.RemoveAll(dir)
	}
	env := &drillEnv{store: getenv("REDIS_ADDR")}
	n := 6
	if env.store == "" {
		n++
	}
	for range n {
		r, err := child.StartRedis(ctx, exe, dir, logsOf(stderr))
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("starting a Redis for the drill: %w", err)
		}
		procs = append(procs, r)
		env.nodes = append(env.nodes, r.Addr)
	}
	if env.store == "" {
		env.store, env.nodes = env.nodes[6], env.nodes[:6]
	}
	fmt.Fprintf(stderr, "drill: lock nodes are %s; the stock is on %s\n", procs[0].Kind, env.store)
	return env, stop, nil
}

// runDrill runs every variant of d o.repeat times, prints a row per run and
// a count per variant, and fails when a run missed its verdict.
func runDrill(ctx context.Context, d *lockDrill, o options, getenv func(string) string, stdout, stderr io.Writer) error {
	for _, f := range []string{"target", "json", "csv", "html", "instances"} {
		if o.set[f] {
			return fmt.Errorf("scenario %s drives the locks on servers of its own and prints its rows: -%s does not apply", d.Name, f)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, drillTimeout)
	defer cancel()
	fmt.Fprintf(stderr, "scenario %s: %s\n", d.Name, d.Summary)
	env, stop, err := startDrillEnv(ctx, getenv, stderr)
	if err != nil {
		return err
	}
	defer stop()
	var missed []string
	for _, v := range d.Variants {
		counts := map[string]int{}
		for range o.repeat {
			out, err := v.Run(ctx, env)
			if err != nil {
				return fmt.Errorf("scenario %s, %s: %w", d.Name, v.Name, err)
			}
			fmt.Fprintln(stdout, out)
			counts[out.Verdict]++
		}
		fmt.Fprintf(stdout, "%s: %s %d/%d (expected %s)\n\n", v.Name, verdictCounts(counts), counts[v.Want], o.repeat, v.Want)
		if counts[v.Want] != o.repeat {
			missed = append(missed, v.Name)
		}
	}
	if missed != nil {
		return fmt.Errorf("scenario %s: %s: %w", d.Name, strings.Join(missed, "; "), errExpectation)
	}
	return nil
}

func verdictCounts(counts map[string]int) string {
	var parts []string
	for v, n := range counts {
		parts = append(parts, fmt.Sprintf("%s×%d", v, n))
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// drillTimeout bounds a whole drill, whatever -repeat asks.
const drillTimeout = 10 * time.Minute
