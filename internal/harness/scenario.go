package harness

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Scenario is a named teaching preset: runs with the verdicts each is
// expected to reach. The service settings it names (instances, lock TTL and
// wait) are for whoever starts the service; against a running target they
// are the operator's to set.
type Scenario struct {
	Name    string
	Summary string
	// Instances is the number of service processes the runs spread over.
	// Default: 1.
	Instances int
	// LockTTL and LockWait are the service settings the scenario needs;
	// zero leaves the service's default.
	LockTTL, LockWait time.Duration
	Steps             []Step
	// Summarize, when not nil, adds lines computed across the rows.
	Summarize func(rows []Row) []string
}

// Step is one run of a scenario, or one per registered lock strategy.
type Step struct {
	// Spec is the workload; the caller fills in Targets and ProductID.
	Spec Spec
	// AllLocks runs Spec once per lock strategy the service lists.
	AllLocks bool
	// Expect gives the verdicts the run may reach, by lock name.
	Expect func(lock string) []string
}

// NotOversold are the verdicts of a run that sold no unit twice.
var NotOversold = []string{Safe, Errors, Undersold}

func always(v ...string) func(string) []string { return func(string) []string { return v } }

// Scenarios are the presets, by name.
var Scenarios = []Scenario{
	{
		Name:    "oversell",
		Summary: "No lock, read-modify-write, a small hold: many buyers read the same stock and each writes it back minus one.",
		Steps: []Step{{
			Spec:   Spec{Lock: "none", Mode: "rmw", Stock: 100, Buyers: 1000, Concurrency: 100, Hold: Duration(2 * time.Millisecond)},
			Expect: always(Oversold),
		}},
	},
	{
		Name:      "cross-process",
		Summary:   "An in-process mutex over three processes serializes each process, not the fleet; a Redis lock with a token does.",
		Instances: 3,
		Steps: []Step{
			{Spec: Spec{Lock: "local", Mode: "rmw", Stock: 100, Buyers: 1000, Concurrency: 60, Hold: Duration(2 * time.Millisecond)}, Expect: always(Oversold)},
			{Spec: Spec{Lock: "token", Mode: "rmw", Stock: 100, Buyers: 1000, Concurrency: 60, Hold: Duration(2 * time.Millisecond)}, Expect: always(Safe)},
		},
	},
	{
		Name:    "sharding",
		Summary: "The token lock on one shard against five: both safe, five shards take five locks in parallel.",
		Steps: []Step{
			{Spec: Spec{Lock: "token", Mode: "rmw", Stock: 500, Buyers: 2000, Concurrency: 100, Shards: 1, Hold: Duration(time.Millisecond)}, Expect: always(Safe)},
			{Spec: Spec{Lock: "token", Mode: "rmw", Stock: 500, Buyers: 2000, Concurrency: 100, Shards: 5, Hold: Duration(time.Millisecond)}, Expect: always(Safe)},
		},
		Summarize: func(rows []Row) []string {
			if len(rows) != 2 || rows[0].RPS == 0 {
				return nil
			}
			return []string{fmt.Sprintf("throughput ratio 5 shards / 1 shard: %.2f× (%.0f vs %.0f req/s)",
				rows[1].RPS/rows[0].RPS, rows[1].RPS, rows[0].RPS)}
		},
	},
	{
		Name:    "strategies",
		Summary: "Every registered lock strategy on the same workload, in one process: only the absent lock oversells.",
		Steps: []Step{{
			Spec:     Spec{Mode: "rmw", Stock: 100, Buyers: 1000, Concurrency: 50, Hold: Duration(time.Millisecond)},
			AllLocks: true,
			Expect: func(lock string) []string {
				if lock == "none" {
					return []string{Oversold}
				}
				return []string{Safe}
			},
		}},
	},
	{
		Name:    "lua-vs-lock",
		Summary: "The stock taken atomically by a Lua script or by a conditional SQL update needs no lock at all; compare with the lock paths.",
		Steps: []Step{
			{Spec: Spec{Lock: "none", Mode: "lua", Stock: 500, Buyers: 2000, Concurrency: 100}, Expect: always(Safe)},
			{Spec: Spec{Lock: "none", Mode: "db", Stock: 500, Buyers: 2000, Concurrency: 100}, Expect: always(Safe)},
			{Spec: Spec{Lock: "token", Mode: "rmw", Stock: 500, Buyers: 2000, Concurrency: 100}, Expect: always(Safe)},
			{Spec: Spec{Lock: "lua-setnx", Mode: "rmw", Stock: 500, Buyers: 2000, Concurrency: 100}, Expect: always(Safe)},
		},
	},
	{
		Name: "pause",
		Summary: "The holder pauses past its 200ms lease (hold 300ms): a lease without renewal lets the next buyer in, " +
			"and both write; a watchdog renews it, a fencing token refuses the stale write.",
		LockTTL:  200 * time.Millisecond,
		LockWait: 10 * time.Second,
		Steps: pauseSteps(map[string][]string{
			"setnx-px": {Oversold}, "token": {Oversold}, "watchdog": NotOversold, "fenced": NotOversold,
		}, "setnx-px", "token", "watchdog", "fenced"),
	},
	{
		Name: "crash",
		Summary: "The first holder never releases: a lock without expiry is held forever and every later buyer " +
			"times out; a lock with a lease recovers when it expires.",
		LockTTL:  300 * time.Millisecond,
		LockWait: time.Second,
		Steps: []Step{
			{Spec: crashSpec("setnx"), Expect: always(Errors)},
			{Spec: crashSpec("setnx-px"), Expect: always(Safe)},
			{Spec: crashSpec("token"), Expect: always(Safe)},
		},
	},
}

func pauseSteps(expect map[string][]string, locks ...string) []Step {
	var steps []Step
	for _, l := range locks {
		steps = append(steps, Step{
			// One shard: every buyer contends for the one lock.
			Spec:   Spec{Lock: l, Mode: "rmw", Stock: 5, Buyers: 15, Concurrency: 5, Shards: 1, Hold: Duration(300 * time.Millisecond)},
			Expect: always(expect[l]...),
		})
	}
	return steps
}

func crashSpec(lock string) Spec {
	// One shard, so that the abandoned lock is the only one.
	return Spec{Lock: lock, Mode: "rmw", Stock: 10, Buyers: 30, Concurrency: 10, Shards: 1, Abandon: true, FaultRequests: 1}
}

// LookupScenario returns the scenario named name.
func LookupScenario(name string) (Scenario, error) {
	for _, s := range Scenarios {
		if s.Name == name {
			return s, nil
		}
	}
	var names []string
	for _, s := range Scenarios {
		names = append(names, s.Name)
	}
	return Scenario{}, fmt.Errorf("%w: no scenario %q (have %v)", ErrSpec, name, names)
}

// ScenarioRun is how to run a scenario: where, and on which products.
type ScenarioRun struct {
	// Targets are the service instances, as many as the scenario's Instances.
	Targets []string
	// ProductID is the product of the first run; run k uses ProductID+k, so
	// that a lock left held by one run cannot touch the next. Default: 1.
	ProductID int64
	// Override, when not nil, adjusts each run's Spec (e.g. a shorter run).
	Override func(*Spec)
	// Progress receives each run's progress with its spec.
	Progress func(Spec, Progress)
	// Done, when not nil, receives each row as it completes.
	Done func(Row)
}

// Expand returns the scenario's runs: its steps with AllLocks expanded over
// locks, each with its expectation.
func (sc Scenario) Expand(locks []string) ([]Spec, [][]string) {
	var specs []Spec
	var expects [][]string
	for _, st := range sc.Steps {
		names := []string{st.Spec.Lock}
		if st.AllLocks {
			names = locks
		}
		for _, l := range names {
			s := st.Spec
			s.Lock = l
			specs = append(specs, s)
			expects = append(expects, st.Expect(l))
		}
	}
	return specs, expects
}

// RunScenario runs every step of sc and checks each row against its
// expectation. It returns the rows, the summary lines, and whether every
// expectation held; a run the service rejects (a strategy its backends
// cannot run, a lock it does not know) is a SKIPPED row, said so in its
// Note, that neither holds nor fails, and the scenario goes on.
func RunScenario(ctx context.Context, sc Scenario, r ScenarioRun) ([]Row, []string, bool, error) {
	if len(r.Targets) == 0 {
		return nil, nil, false, fmt.Errorf("%w: no target", ErrSpec)
	}
	var locks []string
	for _, st := range sc.Steps {
		if st.AllLocks {
			c := NewClient(1)
			ls, err := Locks(ctx, c, r.Targets[0])
			c.CloseIdleConnections()
			if err != nil {
				return nil, nil, false, err
			}
			for _, l := range ls {
				locks = append(locks, l.Name)
			}
			break
		}
	}
	base := max(r.ProductID, 1)
	specs, expects := sc.Expand(locks)
	var rows []Row
	allHeld := true
	for k, s := range specs {
		s.Targets = r.Targets
		s.ProductID = base + int64(k)
		if r.Override != nil {
			r.Override(&s)
		}
		var progress func(Progress)
		if r.Progress != nil {
			progress = func(p Progress) { r.Progress(s, p) }
		}
		row, err := Run(ctx, s, progress)
		if err != nil && !errors.Is(err, ErrRejected) {
			return rows, nil, false, fmt.Errorf("scenario %s, run %d (%s/%s): %w", sc.Name, k+1, s.Lock, s.Mode, err)
		}
		if !row.Check(expects[k]...) && row.Verdict != Skipped {
			allHeld = false
		}
		rows = append(rows, row)
		if r.Done != nil {
			r.Done(row)
		}
	}
	var summary []string
	if sc.Summarize != nil {
		summary = sc.Summarize(rows)
	}
	return rows, summary, allHeld, nil
}
