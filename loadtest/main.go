// Command loadtest drives the order service with many concurrent buyers and
// judges each run: SAFE, OVERSOLD, LOST, UNDERSOLD or ERRORS, from its own
// counts and from the service's audit. By default it starts the service in-process
// (on REDIS_ADDR/MYSQL_DSN when set, else embedded); -target drives running
// instances; -instances K starts K processes sharing one Redis and one
// database. -scenario runs a named experiment of internal/lab/experiment's
// table; -list prints them all. Run it with -h.
package main

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/api"
	"seckill/internal/app"
	"seckill/internal/lab/experiment"
	"seckill/internal/lab/harness"
	"seckill/internal/order"
	"seckill/internal/testkit/child"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args, os.Getenv, os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}

// errExpectation: a run did not reach the verdict -expect or the scenario
// asked for.
var errExpectation = errors.New("expectation not met")

// options are the command line.
type options struct {
	spec      harness.Spec // the workload, Targets and Lock/Mode aside
	locks     string
	modes     string
	targets   string
	instances int
	lockTTL   time.Duration
	lockWait  time.Duration
	scenario  string
	expect    string
	jsonOut   string
	csvOut    string
	htmlOut   string
	repeat    int
	selftest  bool
	ceiling   bool
	// refusals: -ceiling measures the sold-out refusals too.
	refusals bool
	gate     bool
	path     bool
	list     bool
	// concurrencyLimit is -scenario overload's limit on its limited instance.
	concurrencyLimit int
	cpuProfile       string
	logPath          string // -log
	selfDur          time.Duration
	selfRounds       int
	set              map[string]bool // flags given explicitly
}

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet(filepath.Base(args[0]), flag.ContinueOnError)
	fs.SetOutput(stderr)
	s := &o.spec
	dur := func(p *harness.Duration, name string, def time.Duration, help string) {
		*p = harness.Duration(def)
		fs.Func(name, fmt.Sprintf("%s (default %s)", help, def), func(v string) error {
			d, err := time.ParseDuration(v)
			*p = harness.Duration(d)
			return err
		})
	}
	fs.StringVar(&o.targets, "target", "", "comma-separated base URLs of running instances; empty starts the service")
	fs.IntVar(&o.instances, "instances", 1, "service processes to start, sharing one Redis and one database")
	fs.Int64Var(&s.ProductID, "product", 0, "product id of the first run (run k uses id+k); 0 picks a random one")
	fs.IntVar(&s.Stock, "stock", harness.DefaultStock, "initial stock")
	fs.IntVar(&s.Shards, "shards", 0, "stock shards; 0 is the service's default (5)")
	noFallback := fs.Bool("no-fallback", false, "a buyer whose shard is empty is told sold out (no other shard is tried)")
	fs.IntVar(&s.Buyers, "buyers", harness.DefaultBuyers, "distinct users")
	fs.IntVar(&s.Requests, "requests", 0, "order requests; 0 sends one per buyer (or rate×duration)")
	fs.IntVar(&s.Concurrency, "concurrency", harness.DefaultConcurrency, "workers: the most requests in flight")
	fs.Float64Var(&s.Rate, "rate", 0, "open loop: requests per second, latency counted from each request's due time")
	dur(&s.Duration, "duration", 0, "open loop length; in a closed loop, stop sending after it (0: no limit)")
	dur(&s.Timeout, "timeout", harness.DefaultTimeout, "hard bound on each run")
	fs.StringVar(&o.locks, "lock", api.DefaultLock, `lock strategy, a comma-separated list, or "all" (every one the service lists)`)
	fs.StringVar(&o.modes, "mode", api.DefaultMode, "stock mode ("+strings.Join(order.ModeNames(), ", ")+`), a list, or "all"`)
	dur(&s.Hold, "hold", 0, "pause inside the critical section")
	fs.BoolVar(&s.Abandon, "abandon", false, "fault: the lock holder never releases")
	fs.BoolVar(&s.CrashBeforeExpire, "crash-before-expire", false, "fault: the holder crashes before its lease expires")
	dur(&s.ClockSkew, "clock-skew", 0, "fault: skew of the holder's clock")
	fs.BoolVar(&s.ReleaseBeforeCommit, "release-before-commit", false, "fault: the sqlrmw holder releases its lock before the COMMIT (MySQL only)")
	fs.IntVar(&s.FaultRequests, "fault-requests", 0, "apply the faults to the first N requests only; 0 to all")
	fs.DurationVar(&o.lockTTL, "lock-ttl", 0, "LOCK_TTL of the instances the harness starts; 0 keeps the service's (5s)")
	fs.DurationVar(&o.lockWait, "lock-wait", 0, "LOCK_WAIT of the instances the harness starts; 0 keeps the service's (3s)")
	fs.StringVar(&s.AdminToken, "admin-token", getenv("ADMIN_TOKEN"), "the operator token, sent with product resets: the -target service's ADMIN_TOKEN (or the one it made: its “seckill serving” line says it, Redis keeps it at seckill:admin-token); without -target, the instances started get it, or one made for the run [$ADMIN_TOKEN]")
	fs.StringVar(&o.scenario, "scenario", "", "run a named preset: "+scenarioNames()+"; explicit workload flags override it")
	fs.StringVar(&o.expect, "expect", "", "safe or oversold: exit non-zero unless every run reaches it (harness and audit agreeing)")
	fs.StringVar(&o.jsonOut, "json", "", `write the report as JSON to this file ("-" for stdout)`)
	fs.StringVar(&o.csvOut, "csv", "", `write the report as CSV to this file ("-" for stdout)`)
	fs.StringVar(&o.htmlOut, "html", "", "write a self-contained HTML report with charts to this file")
	fs.IntVar(&o.repeat, "repeat", 1, "run the scenario (or every lock and mode) this many times, each on a fresh product, and count the verdicts")
	fs.BoolVar(&o.list, "list", false, "print every experiment (scenario, drill, bench, lesson) from the table: kind, name, what it shows, the verdict expected")
	fs.BoolVar(&o.selftest, "selftest", false, "measure the harness against a bare handler, and wrk on the same handler")
	fs.BoolVar(&o.ceiling, "ceiling", false, "measure the lua and async modes (or -mode) through the service against a bare Gin handler doing one EVALSHA of the lua script (async twice: its consumer paused during the load, then running and its rows awaited), the async consumers' writes against the lua mode's, and sold-out refusals to signed-in buyers against a bare Gin handler answering a constant 409 (see -ceiling-refusals)")
	fs.BoolVar(&o.refusals, "ceiling-refusals", true, fmt.Sprintf("-ceiling: also send purchases of a sold-out public product from %d signed-in buyers, in every round, to the service and to a bare Gin handler that reads the body and answers 409; the product is sold in the lua mode whatever -mode is (an async one needs a Redis with appendonly); false skips them and their sign-ins", refusalBuyers))
	fs.BoolVar(&o.gate, "gate", false, "start two service processes behind the sold-out gate (nginx with libnginx-mod-http-lua) and compare the refusals it answers with the service's; with -requests or -rate, also run that workload through the gate and directly")
	fs.BoolVar(&o.path, "path", false, "-scenario opening: the product asks for a purchase path token, which each buyer fetches before buying")
	fs.IntVar(&o.concurrencyLimit, "concurrency-limit", overloadLimit, "-scenario overload: the ceiling of the adaptive concurrency limit of the instance it floods with the limit on (the other has none)")
	fs.StringVar(&o.logPath, "log", "", `write the services' and libraries' logs (the instances', go-redis's) to this file; "" a new file in the temporary directory, named at the end with its counts; "-" here (stderr)`)
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (the harness, the in-process service and its consumer) to this file")
	fs.DurationVar(&o.selfDur, "selftest-duration", 3*time.Second, "length of each -selftest or -ceiling measurement")
	fs.IntVar(&o.selfRounds, "selftest-rounds", 3, "alternating rounds of -selftest or -ceiling; the medians are compared")
	if err := fs.Parse(args[1:]); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	o.set = make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	if *noFallback {
		s.Fallback = new(bool)
	}
	if o.targets == "" && s.AdminToken == "" {
		// The instances this command starts take it as their ADMIN_TOKEN.
		s.AdminToken = crand.Text()
	}
	switch o.expect {
	case "", "safe", "oversold":
	default:
		return o, fmt.Errorf("-expect must be safe or oversold, not %q", o.expect)
	}
	if o.instances < 1 {
		return o, fmt.Errorf("-instances must be at least 1")
	}
	if o.repeat < 1 {
		return o, fmt.Errorf("-repeat must be at least 1")
	}
	return o, nil
}

// scenarioNames are what -scenario takes: the experiments table's
// scenarios, drills and benches.
func scenarioNames() string {
	return strings.Join(experiment.Names(experiment.Scenario, experiment.Drill, experiment.Bench), ", ")
}

// benchFunc runs a bench: instances of its own, driven its own way, not
// a harness scenario's steps.
type benchFunc func(ctx context.Context, o options, getenv func(string) string, stdout, stderr io.Writer) error

// benches run the table's bench rows, by name; -ceiling, -gate and
// -selftest are the flags of three of them.
var benches = map[string]benchFunc{
	"opening":  openingBench,
	"overload": overloadBench,
	"curves":   curvesBench,
	"ceiling":  luaCeiling,
	"gate":     gateBench,
	"selftest": func(ctx context.Context, o options, _ func(string) string, stdout, stderr io.Writer) error {
		return selfTest(ctx, o, stdout, stderr)
	},
}

// lookupBench returns the runner of the table's bench row named name, or
// nil when name is no bench.
func lookupBench(name string) benchFunc {
	if e, ok := experiment.Lookup(name); ok && e.Kind == experiment.Bench {
		return benches[e.Name]
	}
	return nil
}

// bench is the bench that -selftest, -ceiling or -gate asks for, or -scenario names.
func (o options) bench() benchFunc {
	switch {
	case o.selftest:
		return lookupBench("selftest")
	case o.ceiling:
		return lookupBench("ceiling")
	case o.gate:
		return lookupBench("gate")
	}
	return lookupBench(o.scenario)
}

// printList prints every experiment of the table, one line each: its
// kind, its name, what it shows and the verdict expected.
func printList(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tNAME\tSHOWS\tEXPECT")
	for _, k := range experiment.Kinds {
		for _, e := range experiment.OfKind(k) {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.Kind, e.Name, e.Shows, e.Expect)
		}
	}
	return tw.Flush()
}

func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if ok, err := child.Run(ctx, args, getenv, stdin, stdout, stderr, app.StartChild); ok {
		return err
	}
	// The progress bar, the in-process service's log and the children's
	// stderr copiers all write here, from different goroutines.
	stderr = &syncWriter{w: stderr}
	o, err := parseFlags(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil // the usage is printed; asking for it is not a failure
	}
	if err != nil {
		return err
	}
	logs, err := openRunLog(o.logPath, stderr)
	if err != nil {
		return err
	}
	stderr.(*syncWriter).logs = logs
	defer logs.close(stderr)
	defer redirectRedisLog(logs)()
	if o.targets != "" && o.spec.AdminToken == "" {
		o.spec.AdminToken = keptToken(ctx, getenv("REDIS_ADDR"), stderr)
	}
	if o.cpuProfile != "" {
		stop, err := profileCPU(o.cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	if o.list {
		return printList(stdout)
	}
	if b := o.bench(); b != nil {
		return b(ctx, o, getenv, stdout, stderr)
	}
	if d := lookupDrill(o.scenario); d != nil {
		return runDrill(ctx, d, o, getenv, stdout, stderr)
	}

	sc, err := o.plan()
	if err != nil {
		return err
	}
	if sc != nil && sc.CompareCluster {
		return o.compareCluster(ctx, getenv, *sc, stdout, stderr)
	}
	targets, faults, stop, err := o.instancesToDrive(ctx, getenv, sc, stderr)
	if err != nil {
		return err
	}
	defer stop()
	o.pickProducts(stderr)

	client := harness.NewClient(1)
	defer client.CloseIdleConnections()
	rep := harness.Report{
		Title:   "seckill load test",
		Started: time.Now().UTC(),
		Machine: harness.DetectMachine(ctx, client, targets),
	}
	bar := newProgressBar(stderr)
	if sc == nil {
		locks, err := expandLocks(ctx, client, targets[0], o.locks)
		if err != nil {
			return err
		}
		err = o.runGrid(ctx, targets, locks, &rep, bar)
		return o.conclude(rep, err, nil, stdout)
	}
	fmt.Fprintf(stderr, "scenario %s: %s\n", sc.Name, sc.Summary)
	held, err := o.runScenario(ctx, *sc, targets, faults, &rep, bar)
	var unheld error
	if !held {
		unheld = fmt.Errorf("scenario %s: %w", sc.Name, errExpectation)
	}
	return o.conclude(rep, err, unheld, stdout)
}

// plan reads -scenario: the preset, with the service settings it needs
// where the flags left them to it. Nil when no scenario is asked for.
func (o *options) plan() (*harness.Scenario, error) {
	if o.scenario == "" {
		return nil, nil
	}
	sc, err := harness.LookupScenario(o.scenario)
	if err != nil {
		return nil, err
	}
	if !o.set["instances"] {
		o.instances = max(sc.Instances, 1)
	}
	if o.lockTTL == 0 {
		o.lockTTL = sc.LockTTL
	}
	if o.lockWait == 0 {
		o.lockWait = sc.LockWait
	}
	return &sc, nil
}

// instancesToDrive returns the base URLs of -target, or starts the
// instances asked for and returns them with the injector of the faults
// that strike them (nil for -target); stop ends those it started.
func (o options) instancesToDrive(ctx context.Context, getenv func(string) string, sc *harness.Scenario, stderr io.Writer) (
	targets []string, faults harness.Injector, stop func(), err error) {
	if targets = splitList(o.targets); len(targets) > 0 {
		if sc != nil && (sc.Instances > len(targets) || sc.LockTTL > 0 || sc.LockWait > 0 || sc.ReconcileGrace > 0) {
			fmt.Fprintf(stderr, "note: scenario %s expects %d instance(s), lock TTL %s, lock wait %s and reconcile grace %s; the targets' own settings apply\n",
				sc.Name, max(sc.Instances, 1), sc.LockTTL, sc.LockWait, sc.ReconcileGrace)
		}
		return targets, nil, func() {}, nil
	}
	cfg, err := serviceConfig(getenv, o.lockTTL, o.lockWait, o.spec.AdminToken)
	if err != nil {
		return nil, nil, nil, err
	}
	var needs clusterNeeds
	if sc != nil {
		cfg.ReconcileGrace = sc.ReconcileGrace
		needs.ownRedis = sc.OwnRedis
		needs.cutDB = sc.Strikes(harness.CutDatabase)
	}
	if sc != nil && sc.ReconcileGrace > 0 {
		cfg.ReconcileGrace = sc.ReconcileGrace
	}
	if sc != nil && sc.ClaimIdle > 0 {
		cfg.ClaimIdle = sc.ClaimIdle
	}
	fmt.Fprintf(stderr, "starting %d service instance(s)…\n", o.instances)
	c, err := startCluster(ctx, o.instances, needs, cfg, stderr)
	if err != nil {
		return nil, nil, nil, err
	}
	return c.URLs, c, func() {
		if err := c.stop(); err != nil {
			fmt.Fprintln(stderr, "loadtest: stopping the instances:", err)
		}
	}, nil
}

// pickProducts draws the first product id unless -product gave it, and
// says which ids the runs use.
func (o *options) pickProducts(stderr io.Writer) {
	if o.spec.ProductID == 0 {
		// A random product keeps runs apart from other users of a shared Redis.
		o.spec.ProductID = 1_000_000 + rand.Int64N(1_000_000_000)
	}
	fmt.Fprintf(stderr, "product ids from %d, one per run (-product sets the first); "+
		"each run's buyers are fresh user ids (user_base in -json and -csv)\n", o.spec.ProductID)
}

// runScenario runs sc into rep and reports whether every expectation held.
func (o options) runScenario(ctx context.Context, sc harness.Scenario, targets []string, faults harness.Injector,
	rep *harness.Report, bar *progressBar) (bool, error) {
	rep.Title += ": scenario " + sc.Name
	rows, summary, held, err := harness.RunScenario(ctx, sc, harness.ScenarioRun{
		Targets:   targets,
		ProductID: o.spec.ProductID,
		Override:  func(s *harness.Spec) { o.override(s) },
		Progress:  func(s harness.Spec, p harness.Progress) { bar.update(s.Lock+"/"+s.Mode, p) },
		Done:      func(harness.Row) { bar.finish() },
		Repeat:    o.repeat,
		Faults:    faults,
	})
	rep.Rows, rep.Summary = rows, summary
	for _, r := range rows {
		// Repeated, the summary counts what held; only what did not gets
		// a line of its own.
		if o.repeat == 1 || (r.Expect != nil && !r.Expect.Held && r.Verdict != harness.Skipped) {
			rep.Summary = append(rep.Summary, expectationLine(r))
		}
	}
	return held, err
}

// runGrid runs every lock under every -mode, -repeat times, into rep, each
// run on a product of its own. It stops at the first run that fails other
// than by the service refusing its settings.
func (o options) runGrid(ctx context.Context, targets, locks []string, rep *harness.Report, bar *progressBar) error {
	modes := splitList(o.modes)
	if o.modes == "all" {
		modes = order.ModeNames()
	}
	var runErr error
runs:
	for range o.repeat {
		for _, l := range locks {
			for _, m := range modes {
				s := o.spec
				s.Targets, s.Lock, s.Mode = targets, l, m
				s.ProductID = o.spec.ProductID + int64(len(rep.Rows))
				row, err := harness.Run(ctx, s, func(p harness.Progress) { bar.update(l+"/"+m, p) })
				bar.finish()
				if row.Strategy != "" { // the run got as far as a row
					rep.Rows = append(rep.Rows, row)
				}
				if err != nil && !errors.Is(err, harness.ErrRejected) {
					runErr = fmt.Errorf("run %s/%s: %w", l, m, err)
					break runs
				}
			}
		}
	}
	if o.repeat > 1 {
		rep.Summary = harness.VerdictCounts(rep.Rows)
	}
	return runErr
}

// conclude writes the report and turns the runs into the exit status: the
// error that stopped them, else a scenario's expectation not held, -expect
// not met, or runs in which every request failed.
func (o options) conclude(rep harness.Report, runErr, unheld error, stdout io.Writer) error {
	if werr := o.write(rep, stdout); werr != nil {
		return errors.Join(runErr, werr)
	}
	if runErr != nil {
		return runErr
	}
	if unheld != nil {
		return errors.Join(unheld, allFailed(rep.Rows))
	}
	return errors.Join(o.checkExpect(rep.Rows), allFailed(rep.Rows))
}

// override applies the workload flags given explicitly to a scenario's run.
func (o options) override(s *harness.Spec) {
	for name, apply := range map[string]func(){
		"stock":       func() { s.Stock = o.spec.Stock },
		"shards":      func() { s.Shards = o.spec.Shards },
		"buyers":      func() { s.Buyers = o.spec.Buyers },
		"requests":    func() { s.Requests = o.spec.Requests },
		"concurrency": func() { s.Concurrency = o.spec.Concurrency },
		"rate":        func() { s.Rate = o.spec.Rate },
		"duration":    func() { s.Duration = o.spec.Duration },
		"timeout":     func() { s.Timeout = o.spec.Timeout },
		"hold":        func() { s.Hold = o.spec.Hold },
		"no-fallback": func() { s.Fallback = o.spec.Fallback },
	} {
		if o.set[name] {
			apply()
		}
	}
	s.AdminToken = o.spec.AdminToken
}

func expectationLine(r harness.Row) string {
	if r.Expect == nil {
		return ""
	}
	status := "held"
	switch {
	case r.Verdict == harness.Skipped:
		status = "SKIPPED: " + r.Note
	case !r.Expect.Held && !r.Agree:
		status = "NOT HELD (harness and audit disagree)"
	case !r.Expect.Held:
		status = "NOT HELD"
	}
	return fmt.Sprintf("expected %s: %s, got %s — %s", r.Label(), strings.Join(r.Expect.Want, " or "), r.Verdict, status)
}

// checkExpect applies -expect to every row.
func (o options) checkExpect(rows []harness.Row) error {
	if o.expect == "" {
		return nil
	}
	want := strings.ToUpper(o.expect)
	var bad []string
	for _, r := range rows {
		if r.Verdict != want || !r.Agree {
			bad = append(bad, fmt.Sprintf("%s is %s (agree %v)", r.Label(), r.Verdict, r.Agree))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("-expect %s: %s: %w", o.expect, strings.Join(bad, "; "), errExpectation)
	}
	return nil
}

// errAllFailed: every request of a run failed. Its verdict is ERRORS, but
// nothing was measured, and the likelier cause is the target, not the lock.
var errAllFailed = errors.New("every request failed")

// allFailed reports the runs in which no request was answered with a sale,
// "sold out" or "already bought", unless a scenario expected just that, and
// says what the errors were.
func allFailed(rows []harness.Row) error {
	var labels []string
	codes := make(map[string]int)
	var sample string
	for _, r := range rows {
		if r.Requests == 0 || r.Errors < r.Requests || (r.Expect != nil && r.Expect.Held) {
			continue
		}
		if !slices.Contains(labels, r.Label()) {
			labels = append(labels, r.Label())
		}
		for c, n := range r.ErrorCodes {
			codes[c] += n
		}
		if sample == "" && len(r.ErrorSamples) > 0 {
			sample = r.ErrorSamples[0]
		}
	}
	if len(labels) == 0 {
		return nil
	}
	names := slices.SortedFunc(maps.Keys(codes), func(a, b string) int { return cmp.Or(codes[b]-codes[a], strings.Compare(a, b)) })
	var counted []string
	for _, c := range names {
		counted = append(counted, fmt.Sprintf("%s %d", c, codes[c]))
	}
	var more string
	if sample != "" {
		more = " (e.g. " + sample + ")"
	}
	if codes["rate_limited"] > 0 {
		more += "; the target limits each user's order rate: start it with -rate-limit 0 (go run ./cmd/seckill -rate-limit 0)"
	}
	return fmt.Errorf("%s: %w: %s%s", strings.Join(labels, ", "), errAllFailed, strings.Join(counted, ", "), more)
}

// expandLocks turns -lock into names; "all" asks the service for its list.
func expandLocks(ctx context.Context, c *http.Client, target, spec string) ([]string, error) {
	if spec != "all" {
		return splitList(spec), nil
	}
	ls, err := harness.Locks(ctx, c, target)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, l := range ls {
		names = append(names, l.Name)
	}
	return names, nil
}

// write prints the table to stdout and writes the files asked for.
func (o options) write(rep harness.Report, stdout io.Writer) error {
	rep.Summary = slices.DeleteFunc(rep.Summary, func(s string) bool { return s == "" })
	if o.jsonOut != "-" && o.csvOut != "-" {
		if err := rep.WriteTable(stdout); err != nil {
			return err
		}
	}
	outputs := []struct {
		path  string
		write func(io.Writer) error
	}{{o.jsonOut, rep.WriteJSON}, {o.csvOut, rep.WriteCSV}, {o.htmlOut, rep.WriteHTML}}
	var errs []error
	for _, out := range outputs {
		if out.path == "" {
			continue
		}
		if out.path == "-" {
			errs = append(errs, out.write(stdout))
			continue
		}
		errs = append(errs, writeFile(out.path, out.write))
	}
	return errors.Join(errs...)
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// syncWriter serializes writes to w.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
	// logs is where the services' and libraries' logs go (logsOf); nil:
	// here.
	logs *runLog
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// profileCPU starts a CPU profile written to path; stop ends it.
func profileCPU(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("creating the CPU profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting the CPU profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// keptToken reads the operator token that -target's service made and keeps
// in Redis (no ADMIN_TOKEN anywhere: the compose file's lab profile), when
// REDIS_ADDR names that Redis; "" otherwise, and the resets then say 401.
func keptToken(ctx context.Context, addr string, stderr io.Writer) string {
	if addr == "" {
		return ""
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	token, err := rdb.Get(ctx, app.OperatorTokenKey).Result()
	if err != nil {
		fmt.Fprintf(stderr, "no -admin-token, and none read from %s on %s: %v\n", app.OperatorTokenKey, addr, err)
		return ""
	}
	return token
}
