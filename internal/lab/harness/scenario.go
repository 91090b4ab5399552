package harness

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"seckill/internal/lab/experiment"
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
	// LockTTL, LockWait and ReconcileGrace are the service settings the
	// scenario needs; zero leaves the service's default.
	LockTTL, LockWait, ReconcileGrace time.Duration
	// ClaimIdle is the consumers' claim idle (-claim-idle); zero leaves
	// the service's default.
	ClaimIdle time.Duration
	// OwnRedis: the instances must share a Redis that the runner started
	// for the scenario, whatever REDIS_ADDR names, because a fault strikes
	// it (a shared server is never paused).
	OwnRedis bool
	// CompareCluster: the runner runs the steps twice, on instances over a
	// Redis of its own and over a Redis Cluster of its own (3 masters, a
	// replica each), and counts each node's commands around each pass.
	CompareCluster bool
	Steps          []Step
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
	// Fault, when not nil, strikes the service's processes in the middle
	// of the run; only a runner that started them can (ScenarioRun.Faults),
	// and the run is SKIPPED elsewhere.
	Fault *Fault
	// Reconcile runs the reconciler after the load, before the audit.
	Reconcile bool
	// Verify, when not nil, checks the row beyond its verdict; an error
	// says why the expectation did not hold.
	Verify func(Row) error
	// Runs is how many times the step runs in each pass of the scenario,
	// one after another, each on a product of its own. Default: 1.
	Runs int
	// Across, when not nil, must hold over every run of the step (Runs per
	// pass, times the passes), beside each run's Expect.
	Across *Across
}

// Across is a check over the runs of one step: at least AtLeast of them
// reach one of Verdicts. A flaw that shows only when a fault lands at its
// moment can be asserted so; a check of each run alone could only accept
// both outcomes, and so could never fail.
type Across struct {
	Verdicts []string
	AtLeast  int
}

// Describe says what a demands of runs runs: "OVERSOLD in at least 1 of 7
// runs".
func (a Across) Describe(runs int) string {
	return fmt.Sprintf("%s in at least %d of %d runs", strings.Join(a.Verdicts, " or "), a.AtLeast, runs)
}

// Check counts the rows that reach one of a's verdicts, SKIPPED ones aside,
// and says whether they are enough; checked is false when every row was
// SKIPPED, which neither holds nor fails, as for one run.
func (a Across) Check(rows []Row) (reached, runs int, held, checked bool) {
	for _, r := range rows {
		if r.Verdict == Skipped {
			continue
		}
		runs++
		if slices.Contains(a.Verdicts, r.Verdict) {
			reached++
		}
	}
	return reached, runs, reached >= a.AtLeast, runs > 0
}

// Fault actions.
const (
	// PauseInstance stops an instance's whole process for Fault.For
	// (SIGSTOP, then SIGCONT): its threads, timers and lock renewals stop.
	PauseInstance = "pause-instance"
	// KillInstance ends an instance at once (SIGKILL), between a take and
	// its order for some of its purchases.
	KillInstance = "kill-instance"
	// PauseRedis stops the Redis the runner started for Fault.For.
	PauseRedis = "pause-redis"
)

// Fault is what a step does to the service's processes during its run.
type Fault struct {
	Action string
	// Instance is the instance paused or killed, as indexed in the targets.
	Instance int
	// For is how long a pause lasts.
	For time.Duration
	// After is how many requests are answered before the fault strikes.
	After int
	// AfterOwn makes After count the answers of Instance only. A pause
	// struck as a contended instance answers lands on its next buyer, in
	// the critical section: a process hands a lock it releases to its own
	// waiters first (lock's notices), so that buyer holds it by then.
	AfterOwn bool
	// Persistence, when set, is the persistence the runner's Redis is
	// switched to before the run (none, everysec, always; see
	// child.Redis.SetPersistence).
	Persistence string
}

func (f Fault) String() string {
	switch f.Action {
	case PauseInstance:
		return fmt.Sprintf("instance %d paused for %s", f.Instance, f.For)
	case KillInstance:
		return fmt.Sprintf("instance %d killed", f.Instance)
	case PauseRedis:
		return fmt.Sprintf("Redis paused for %s", f.For)
	case KillConsumer:
		return fmt.Sprintf("instance %d killed while its consumer held orders", f.Instance)
	case CutDatabase:
		return fmt.Sprintf("database cut off for %s", f.For)
	case KillRedis:
		return fmt.Sprintf("Redis (persistence %s) killed and restarted", f.Persistence)
	case PersistRedis:
		return fmt.Sprintf("Redis persistence %s", f.Persistence)
	}
	return f.Action
}

// Injector strikes faults at the processes of a service it started. The
// load test command is one; a harness aimed at instances it did not start
// has none.
type Injector interface {
	// Check says why f cannot be struck, or nil when it can.
	Check(f Fault) error
	// Inject strikes f and returns when it is over: a pause has ended, a
	// killed instance has exited.
	Inject(ctx context.Context, f Fault) error
	// Heal restarts what a fault left down (a killed instance, on its
	// address), so that the next run finds the service whole.
	Heal(ctx context.Context) error
}

// NotOversold are the verdicts of a run that sold no unit twice.
var NotOversold = []string{Safe, Errors, Undersold}

func always(v ...string) func(string) []string { return func(string) []string { return v } }

// Scenarios are the presets in the order of the scenario rows of the
// experiments table, each with its row's summary: the table says what
// there is and what each shows, presets what each runs.
var Scenarios = fromTable(presets)

// fromTable returns the preset of each scenario row of experiment.All,
// with the row's summary. A row without a preset, or a preset without a
// row, is left out here and fails TestScenariosAreTheTablesRows.
func fromTable(presets []Scenario) []Scenario {
	var out []Scenario
	for _, e := range experiment.OfKind(experiment.Scenario) {
		if i := slices.IndexFunc(presets, func(p Scenario) bool { return p.Name == e.Name }); i >= 0 {
			sc := presets[i]
			sc.Summary = e.Summary
			out = append(out, sc)
		}
	}
	return out
}

// presets are the steps of each scenario, by the name of its row.
var presets = []Scenario{
	{
		Name: "oversell",
		Steps: []Step{{
			Spec:   Spec{Lock: "none", Mode: "rmw", Stock: 100, Buyers: 1000, Concurrency: 100, Hold: Duration(2 * time.Millisecond)},
			Expect: always(Oversold),
		}},
	},
	{
		Name:      "cross-process",
		Instances: 3,
		Steps: []Step{
			{Spec: Spec{Lock: "local", Mode: "rmw", Stock: 100, Buyers: 1000, Concurrency: 60, Hold: Duration(2 * time.Millisecond)}, Expect: always(Oversold)},
			{Spec: Spec{Lock: "token", Mode: "rmw", Stock: 100, Buyers: 1000, Concurrency: 60, Hold: Duration(2 * time.Millisecond)}, Expect: always(Safe)},
		},
	},
	{
		Name:      "sharding",
		Steps:     shardingSteps(0, Duration(time.Millisecond)),
		Summarize: shardingRatios,
	},
	{
		Name: "strategies",
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
		Name: "lua-vs-lock",
		Steps: []Step{
			{Spec: Spec{Lock: "none", Mode: "lua", Stock: 500, Buyers: 2000, Concurrency: 100}, Expect: always(Safe)},
			{Spec: Spec{Lock: "none", Mode: "db", Stock: 500, Buyers: 2000, Concurrency: 100}, Expect: always(Safe)},
			{Spec: Spec{Lock: "token", Mode: "rmw", Stock: 500, Buyers: 2000, Concurrency: 100}, Expect: always(Safe)},
			{Spec: Spec{Lock: "lua-setnx", Mode: "rmw", Stock: 500, Buyers: 2000, Concurrency: 100}, Expect: always(Safe)},
		},
	},
	{
		Name: "no-fallback",
		Steps: []Step{
			{Spec: noFallbackSpec(7, 7, false), Expect: always(Undersold)},
			{Spec: noFallbackSpec(7, 7, true), Expect: always(Safe)},
			{Spec: noFallbackSpec(100, 1, false), Expect: always(Safe)},
		},
	},
	{
		Name:     "long-hold",
		LockTTL:  200 * time.Millisecond,
		LockWait: 10 * time.Second,
		Steps: longHoldSteps(map[string][]string{
			"setnx-px": {Oversold}, "token": {Oversold}, "watchdog": NotOversold, "fenced": NotOversold,
		}, "setnx-px", "token", "watchdog", "fenced"),
	},
	{
		Name: "pay-vs-timeout",
		Steps: []Step{
			{Spec: payRaceSpec("naive"), Expect: always(Oversold)},
			{Spec: payRaceSpec("conditional"), Expect: always(Safe)},
		},
	},
	{
		Name:      "pause",
		Instances: 2,
		LockTTL:   300 * time.Millisecond,
		LockWait:  10 * time.Second,
		Steps:     pauseSteps(),
	},
	{
		Name:     "redis-pause",
		OwnRedis: true,
		LockWait: 10 * time.Second,
		Steps: []Step{
			{Spec: faultSpec("none", "lua", 300), Fault: &Fault{Action: PauseRedis, For: 3 * time.Second, After: 150}, Expect: always(Safe, Errors)},
			{Spec: faultSpec("token", "rmw", 300), Fault: &Fault{Action: PauseRedis, For: 3 * time.Second, After: 150}, Expect: always(Safe, Errors)},
		},
	},
	{
		Name:           "instance-kill",
		Instances:      2,
		ReconcileGrace: time.Second,
		Steps: []Step{
			{Spec: faultSpec("none", "lua", 300), Fault: &Fault{Action: KillInstance, Instance: 1, After: 40}, Reconcile: true, Expect: always(Errors, Safe)},
			{Spec: faultSpec("token", "rmw", 300), Fault: &Fault{Action: KillInstance, Instance: 1, After: 40}, Reconcile: true, Expect: always(Errors, Safe)},
		},
	},
	{
		Name: "unlock-before-commit",
		Steps: []Step{
			{Spec: unlockBeforeCommitSpec(true), Expect: always(Oversold)},
			{Spec: unlockBeforeCommitSpec(false), Expect: always(Safe)},
		},
	},
	{
		Name:           "crash-after-take",
		ReconcileGrace: 2 * time.Second,
		Steps: []Step{
			{Spec: crashAfterTakeSpec(), Expect: always(Lost)},
			{Spec: crashAfterTakeSpec(), Reconcile: true, Expect: always(Errors)},
		},
	},
	{
		Name:     "crash",
		LockTTL:  300 * time.Millisecond,
		LockWait: time.Second,
		Steps: []Step{
			{Spec: crashSpec("setnx"), Expect: always(Errors)},
			{Spec: crashSpec("setnx-px"), Expect: always(Safe)},
			{Spec: crashSpec("token"), Expect: always(Safe)},
		},
	},
	// Issue 12: etcd's lock through the service. The drills etcd-pause,
	// ap-vs-cp, etcd-partition and failover (loadtest) strike below the API.
	{
		Name:      "pause-etcd",
		Instances: 2,
		LockTTL:   time.Second,
		LockWait:  10 * time.Second,
		Steps: []Step{{
			Spec:   Spec{Lock: "etcd", Mode: "rmw", Stock: 20, Buyers: 40, Concurrency: 8, Shards: 1, Hold: Duration(50 * time.Millisecond)},
			Fault:  &Fault{Action: PauseInstance, Instance: 1, For: 3 * time.Second, After: 2},
			Expect: always(NotOversold...),
		}},
	},
	// The async mode's faults (issue 9, items 4 and 5).
	{
		Name:      "async-consumer-kill",
		Instances: 2,
		ClaimIdle: time.Second,
		OwnRedis:  true, // no other deployment's consumer on its streams
		Steps: []Step{{
			// An open loop, so that orders keep arriving while the fault
			// looks for a moment when the instance's consumer holds some.
			Spec:   Spec{Lock: "none", Mode: "async", Stock: 5000, Buyers: 5000, Concurrency: 40, Rate: 600, Duration: Duration(8 * time.Second)},
			Fault:  &Fault{Action: KillConsumer, Instance: 1, After: 300},
			Expect: always(Errors, Safe),
		}},
	},
	{
		Name:     "async-db-outage",
		OwnRedis: true,
		Steps: []Step{{
			Spec:   Spec{Lock: "none", Mode: "async", Stock: 3000, Buyers: 3000, Concurrency: 20, Rate: 200, Duration: Duration(15 * time.Second)},
			Fault:  &Fault{Action: CutDatabase, For: 10 * time.Second, After: 400},
			Expect: always(Safe),
		}},
	},
	{
		Name:      "async-durability",
		OwnRedis:  true,
		Steps:     durabilitySteps(),
		Summarize: durabilityTable,
	},
	{
		Name:     "async-poison",
		OwnRedis: true,
		Steps: []Step{{
			Spec:   Spec{Lock: "none", Mode: "async", Stock: 500, Buyers: 500, Concurrency: 20, Poison: true, FaultRequests: 3},
			Expect: always(Safe),
			Verify: func(r Row) error {
				if r.DeadLettered != 3 || r.Sold != r.OK-3 {
					return fmt.Errorf("%d dead letters and %d orders for %d answered 202: want 3 and %d", r.DeadLettered, r.Sold, r.OK, r.OK-3)
				}
				return nil
			},
		}},
	},
	// --- Redis Cluster (issue 11) ---
	{
		Name:           "cluster",
		CompareCluster: true,
		Steps: []Step{
			{Spec: clusterSpec("none", "lua"), Expect: always(Safe)},
			{Spec: clusterSpec("token", "rmw"), Expect: always(Safe)},
			{Spec: clusterSpec("none", "async"), Expect: always(Safe)},
		},
	},
}

// clusterSpec is a run of the cluster scenario: a unit for every buyer, so
// that every request reaches Redis (a sold-out product answers from a flag).
func clusterSpec(lock, mode string) Spec {
	return Spec{Lock: lock, Mode: mode, Stock: 3000, Buyers: 3000, Concurrency: 100, Shards: 6}
}

// payRaceSpec is a run of the pay-vs-timeout scenario under a lifecycle.
func payRaceSpec(lifecycle string) Spec {
	return Spec{Lock: "none", Mode: "lua", Stock: 200, Buyers: 200, Concurrency: 50,
		PayTimeout: Duration(time.Second), PayJitter: Duration(100 * time.Millisecond), Lifecycle: lifecycle}
}

// crashAfterTakeSpec is a run of the crash-after-take scenario: stock for
// every buyer, so that nobody is told sold out while units are stranded.
func crashAfterTakeSpec() Spec {
	return Spec{Lock: "none", Mode: "mq", Stock: 100, Buyers: 100, Concurrency: 20, CrashAfterTake: true, FaultRequests: 10}
}

// shardingSteps are the sharding scenario's runs: one shard then five, at
// each hold. Stock covers every buyer, so that every request takes the lock:
// a sold-out product answers from a flag without touching Redis, which would
// measure that flag rather than the lock.
func shardingSteps(holds ...Duration) []Step {
	var steps []Step
	for _, h := range holds {
		for _, n := range []int{1, 5} {
			steps = append(steps, Step{
				Spec:   Spec{Lock: "token", Mode: "rmw", Stock: 2000, Buyers: 2000, Concurrency: 100, Shards: n, Hold: h},
				Expect: always(Safe),
			})
		}
	}
	return steps
}

// shardingRatios gives, per hold, the median throughput of five shards over
// that of one, across every repeat of the scenario.
func shardingRatios(rows []Row) []string {
	var holds []int64
	rps := make(map[[2]int64][]float64) // by hold and shards
	for _, r := range rows {
		if r.Verdict == Skipped || r.RPS == 0 {
			continue
		}
		if !slices.Contains(holds, r.HoldMS) {
			holds = append(holds, r.HoldMS)
		}
		k := [2]int64{r.HoldMS, int64(r.Shards)}
		rps[k] = append(rps[k], r.RPS)
	}
	var lines []string
	for _, h := range holds {
		one, five := rps[[2]int64{h, 1}], rps[[2]int64{h, 5}]
		if len(one) == 0 || len(five) == 0 {
			continue
		}
		bound := "not lock-bound: the lock is held for a few round trips; the work outside it and the cores are the limit"
		if h > 0 {
			bound = "lock-bound: the hold inside the critical section makes the one lock the limit"
		}
		lines = append(lines, fmt.Sprintf("hold %dms: 5 shards / 1 shard = %.2f× (median %.0f vs %.0f req/s over %d run(s) each) — %s",
			h, Median(five)/Median(one), Median(five), Median(one), min(len(one), len(five)), bound))
	}
	return lines
}

// noFallbackSpec is a run of the no-fallback scenario: 7 units over 5 shards.
func noFallbackSpec(buyers, concurrency int, fallback bool) Spec {
	return Spec{Lock: "token", Mode: "rmw", Stock: 7, Shards: 5, Buyers: buyers, Concurrency: concurrency, Fallback: new(fallback)}
}

// Median is the middle value of v (the upper one of an even count), 0 when
// v is empty.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// VerdictCounts summarizes repeated runs: per row label, in the order the
// labels first appear, how many runs reached each verdict, the units
// oversold over all of them and, when the runs had expectations, how many
// held.
func VerdictCounts(rows []Row) []string {
	type count struct {
		runs, oversold, early, expected, held int
		verdicts                              map[string]int
	}
	var labels []string
	counts := make(map[string]*count)
	for _, r := range rows {
		l := r.Label()
		c := counts[l]
		if c == nil {
			c = &count{verdicts: make(map[string]int)}
			counts[l] = c
			labels = append(labels, l)
		}
		c.runs++
		c.oversold += r.Oversold
		c.early += r.SoldOutEarly
		c.verdicts[r.Verdict]++
		if r.Expect != nil && r.Verdict != Skipped {
			c.expected++
			if r.Expect.Held {
				c.held++
			}
		}
	}
	var lines []string
	for _, l := range labels {
		c := counts[l]
		var vs []string
		for _, v := range []string{Safe, Oversold, Lost, Undersold, Errors, Skipped} {
			if n := c.verdicts[v]; n > 0 {
				vs = append(vs, fmt.Sprintf("%s %d", v, n))
			}
		}
		line := fmt.Sprintf("%s: %d runs: %s; oversold units %d", l, c.runs, strings.Join(vs, ", "), c.oversold)
		if c.early > 0 {
			line += fmt.Sprintf("; told sold out early %d", c.early)
		}
		if c.expected > 0 {
			line += fmt.Sprintf("; expectation held %d/%d", c.held, c.expected)
		}
		lines = append(lines, line)
	}
	return lines
}

func longHoldSteps(expect map[string][]string, locks ...string) []Step {
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

// anyVerdict: the run may reach any verdict; what it shows is in its row.
var anyVerdict = []string{Safe, Errors, Undersold, Oversold}

// pauseRuns is how many times each lock of the pause scenario runs. One
// run of token or watchdog need not oversell (the pause may miss the
// holder; the watchdog's renewal, waking with the holder, may refuse its
// write first), so a run alone may reach any verdict; across pauseRuns
// runs at least one must oversell. Measured over 50 runs each
// (docs/SCENARIOS.md, 20 on a quiet machine and 30 at a load average of
// 20 on 2 cores), a run oversold 47 times in 50 under token and 39 under
// watchdog. A correct lock fails the check only when all its runs miss:
// under watchdog 0.22^7 ≈ 3e-5 at the measured 0.78, and 0.36^7 ≈ 8e-4
// at 0.64, the rate's lower 95% bound from 39 of 50; token less.
const pauseRuns = 7

// pauseOversells is what the pause must show of the token and watchdog
// locks across their runs.
var pauseOversells = &Across{Verdicts: []string{Oversold}, AtLeast: 1}

func pauseSteps() []Step {
	var steps []Step
	for _, l := range []string{"token", "watchdog", "fenced"} {
		st := Step{
			// One shard: the buyers of both instances contend for one lock,
			// held 50ms at a time, well inside the lease. The pause strikes
			// as instance 1 answers its 4th: by then it holds the lock for
			// runs of its buyers, its own waiters first, and the next of
			// them is in the critical section (the first answers may come
			// while the other instance's buyers wait for the lock).
			Spec:   Spec{Lock: l, Mode: "rmw", Stock: 20, Buyers: 40, Concurrency: 8, Shards: 1, Hold: Duration(50 * time.Millisecond)},
			Fault:  &Fault{Action: PauseInstance, Instance: 1, For: time.Second, After: 4, AfterOwn: true},
			Runs:   pauseRuns,
			Expect: always(anyVerdict...),
		}
		if l == "fenced" {
			st.Expect = always(NotOversold...)
		} else {
			st.Across = pauseOversells
		}
		steps = append(steps, st)
	}
	return steps
}

// faultSpec is a burst for the fault scenarios: more stock than any one
// instance's buyers can take, so that nobody is told "sold out" while the
// units of purchases cut short wait for the reconciler.
func faultSpec(lock, mode string, stock int) Spec {
	return Spec{Lock: lock, Mode: mode, Stock: stock, Buyers: 300, Concurrency: 40}
}

func unlockBeforeCommitSpec(fault bool) Spec {
	return Spec{Lock: "token", Mode: "sqlrmw", Stock: 20, Buyers: 100, Concurrency: 20,
		Hold: Duration(5 * time.Millisecond), ReleaseBeforeCommit: fault}
}

func crashSpec(lock string) Spec {
	// One shard, so that the abandoned lock is the only one.
	return Spec{Lock: lock, Mode: "rmw", Stock: 10, Buyers: 30, Concurrency: 10, Shards: 1, Abandon: true, FaultRequests: 1}
}

// run runs s, striking f in its middle when f is not nil, or returns a
// SKIPPED row that says why f cannot be struck.
func (r ScenarioRun) run(ctx context.Context, s Spec, f *Fault, progress func(Progress)) (Row, error) {
	if f == nil {
		return Run(ctx, s, progress)
	}
	var why error
	switch {
	case r.Faults == nil:
		why = errors.New("only a run that starts the service's processes can strike them, not one aimed at -target instances")
	case f.Instance >= len(s.Targets) && f.Action != PauseRedis && f.Action != KillRedis && f.Action != PersistRedis:
		why = fmt.Errorf("there are %d instances", len(s.Targets))
	default:
		why = r.Faults.Check(*f)
	}
	if why != nil {
		row := newRow(s)
		row.Verdict, row.AuditVerdict = Skipped, Skipped
		row.Note = fmt.Sprintf("needs %s: %v", f, why)
		return row, nil
	}
	if f.Persistence != "" {
		if err := r.Faults.Inject(ctx, Fault{Action: PersistRedis, Persistence: f.Persistence}); err != nil {
			return newRow(s), err
		}
	}
	if f.Action == PersistRedis { // a setting, not a fault in the middle
		row, err := Run(ctx, s, progress)
		if row.Note == "" {
			row.Note = f.String()
		}
		return row, err
	}
	s.MidwayAfter = f.After
	if f.AfterOwn {
		s.MidwayTarget = &f.Instance
	}
	s.Midway = func(ctx context.Context) error { return r.Faults.Inject(ctx, *f) }
	row, err := Run(ctx, s, progress)
	if row.Note == "" {
		row.Note = f.String()
	}
	return row, errors.Join(err, r.Faults.Heal(ctx))
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
	// Repeat runs the whole scenario this many times, each run on a product
	// of its own, and adds VerdictCounts to the summary. Default: 1.
	Repeat int
	// Faults strikes the steps' faults; nil skips the steps that have one.
	Faults Injector
}

// planned is one run of a scenario: a step with its lock named. Runs of
// one step and lock share a group, which its Across is checked over.
type planned struct {
	spec      Spec
	expect    []string
	fault     *Fault
	reconcile bool
	verify    func(Row) error
	group     int
	across    *Across
}

// expand returns the scenario's runs: its steps with AllLocks expanded
// over locks, each Runs times, and the number of groups.
func (sc Scenario) expand(locks []string) ([]planned, int) {
	var runs []planned
	groups := 0
	for _, st := range sc.Steps {
		names := []string{st.Spec.Lock}
		if st.AllLocks {
			names = locks
		}
		for _, l := range names {
			s := st.Spec
			s.Lock = l
			p := planned{spec: s, expect: st.Expect(l), fault: st.Fault, reconcile: st.Reconcile, verify: st.Verify,
				group: groups, across: st.Across}
			for range max(st.Runs, 1) {
				runs = append(runs, p)
			}
			groups++
		}
	}
	return runs, groups
}

// checkAcross checks each group's Across over its rows: a line per check,
// and whether all held.
func checkAcross(runs []planned, groups int, rows []Row) ([]string, bool) {
	byGroup := make([][]Row, groups)
	across := make([]*Across, groups)
	for n, r := range rows {
		p := runs[n%len(runs)]
		byGroup[p.group] = append(byGroup[p.group], r)
		across[p.group] = p.across
	}
	var lines []string
	allHeld := true
	for g, a := range across {
		if a == nil {
			continue
		}
		reached, n, held, checked := a.Check(byGroup[g])
		status := "held"
		switch {
		case !checked:
			status = "not checked: every run SKIPPED"
		case !held:
			status, allHeld = "NOT HELD", false
		}
		lines = append(lines, fmt.Sprintf("across the runs of %s: %s in %d of %d, want at least %d — %s",
			byGroup[g][0].Label(), strings.Join(a.Verdicts, " or "), reached, n, a.AtLeast, status))
	}
	return lines, allHeld
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
	runs, groups := sc.expand(locks)
	repeat := max(r.Repeat, 1)
	var rows []Row
	allHeld := true
	for n := range repeat * len(runs) {
		k := n % len(runs)
		s := runs[k].spec
		s.Targets = r.Targets
		s.ProductID = base + int64(n)
		s.Reconcile = runs[k].reconcile
		if r.Override != nil {
			r.Override(&s)
		}
		var progress func(Progress)
		if r.Progress != nil {
			progress = func(p Progress) { r.Progress(s, p) }
		}
		row, err := r.run(ctx, s, runs[k].fault, progress)
		if err != nil && !errors.Is(err, ErrRejected) {
			return rows, nil, false, fmt.Errorf("scenario %s, run %d (%s/%s): %w", sc.Name, n+1, s.Lock, s.Mode, err)
		}
		if !row.Check(runs[k].expect...) && row.Verdict != Skipped {
			allHeld = false
		}
		if v := runs[k].verify; v != nil && row.Verdict != Skipped {
			if err := v(row); err != nil {
				row.Expect.Held, allHeld = false, false
				row.Note = strings.TrimPrefix(row.Note+"; "+err.Error(), "; ")
			}
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
	if len(rows) > groups {
		summary = append(summary, VerdictCounts(rows)...)
	}
	lines, held := checkAcross(runs, groups, rows)
	return rows, append(summary, lines...), allHeld && held, nil
}

// Fault actions of the async mode's scenarios.
const (
	// KillConsumer kills an instance (SIGKILL) while its consumer holds
	// queued orders delivered and not acknowledged, and is over once the
	// living consumers have claimed them all.
	KillConsumer = "kill-consumer"
	// CutDatabase makes the database unreachable for Fault.For: the
	// runner's proxy in front of it is cut.
	CutDatabase = "cut-database"
	// KillRedis kills the runner's Redis (SIGKILL) and starts it again on
	// its address and directory: what it kept is what its persistence kept.
	KillRedis = "kill-redis"
	// PersistRedis switches the runner's Redis to Fault.Persistence.
	PersistRedis = "persist-redis"
)

// durabilityVariants are the async-durability scenario's persistences.
var durabilityVariants = []string{"none", "everysec", "always"}

// durabilitySteps are, per persistence, a run killed mid-way that counts
// the 202s lost, then one without a kill that measures the throughput.
func durabilitySteps() []Step {
	spec := Spec{Lock: "none", Mode: "async", Stock: 20000, Buyers: 20000, Concurrency: 50}
	expect := map[string][]string{"none": {Lost}, "everysec": anyVerdictOrLost, "always": {Safe, Errors}}
	var steps []Step
	for _, p := range durabilityVariants {
		s := spec
		s.CheckAccepted = true
		steps = append(steps, Step{Spec: s, Fault: &Fault{Action: KillRedis, Persistence: p, After: 4000}, Expect: always(expect[p]...)})
	}
	for _, p := range durabilityVariants {
		steps = append(steps, Step{Spec: spec, Fault: &Fault{Action: PersistRedis, Persistence: p}, Expect: always(Safe)})
	}
	return steps
}

// anyVerdictOrLost: everysec may lose about a second's writes, or none
// (Redis postpones its write(2) while a slow fsync runs: INVARIANT.md).
// What it may not do is sell a unit twice or strand one: a stream entry and
// its take are one script, in one append-only record.
var anyVerdictOrLost = []string{Safe, Errors, Lost}

// durabilityTable sums the async-durability rows up per persistence: the
// 202s lost when Redis was killed, and the req/s without a kill.
func durabilityTable(rows []Row) []string {
	n := len(durabilityVariants)
	var lines []string
	for i, p := range durabilityVariants {
		var lost, twice, accepted, runs int
		var verdicts []string
		var rps []float64
		for k, r := range rows {
			if r.Verdict == Skipped {
				continue
			}
			switch k % (2 * n) {
			case i:
				lost += r.Missing202
				twice += r.Twice202
				accepted += r.OK
				runs++
				verdicts = append(verdicts, r.Verdict)
			case n + i:
				rps = append(rps, r.RPS)
			}
		}
		if runs == 0 {
			continue
		}
		lines = append(lines, fmt.Sprintf("persistence %s: %d of %d orders answered 202 never reached the table over %d kill(s) (%s), %d of them an id told to a second buyer; %.0f req/s without a kill (median of %d)",
			p, lost, accepted, runs, strings.Join(verdicts, " "), twice, Median(rps), len(rps)))
	}
	return lines
}

// Strikes reports whether a step of sc strikes the fault action.
func (sc Scenario) Strikes(action string) bool {
	for _, st := range sc.Steps {
		if st.Fault != nil && st.Fault.Action == action {
			return true
		}
	}
	return false
}
