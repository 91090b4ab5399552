package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/api"
	"seckill/internal/app"
	"seckill/internal/gate"
	"seckill/internal/lab/harness"
	"seckill/internal/reconcile"
	"seckill/internal/session"
	"seckill/internal/stock"
	"seckill/internal/testkit"
	"seckill/internal/testkit/child"
	"seckill/internal/testkit/testenv"
)

// TestMain lets the test binary be a service instance or a Redis: the
// cluster re-executes the running binary (see child.Run), and under go test
// that binary is this one.
func TestMain(m *testing.M) { child.Main(testkit.Summarize(m.Run), app.StartChild) }

// backends returns the environment the command sees: the real Redis when
// REDIS_ADDR is set (its keys for product are deleted afterwards), a
// database of the test's own when MYSQL_DSN is set, else nothing (embedded).
func backends(t *testing.T, product int64, runs int) func(string) string {
	t.Helper()
	env := map[string]string{"ADMIN_TOKEN": testenv.AdminToken}
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		env["REDIS_ADDR"] = addr
		t.Cleanup(func() { deleteProductKeys(t, addr, product, runs) })
	}
	if dsn := os.Getenv("MYSQL_DSN"); dsn != "" {
		env["MYSQL_DSN"] = testenv.Database(t, dsn)
	}
	t.Logf("backends: redis %q, mysql set %v", env["REDIS_ADDR"], env["MYSQL_DSN"] != "")
	return func(k string) string { return env[k] }
}

// deleteProductKeys removes the service's keys of the products a test used
// from the shared Redis.
func deleteProductKeys(t *testing.T, addr string, product int64, runs int) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	var ids []int64
	var extra []string
	for p := product; p < product+int64(runs); p++ {
		ids = append(ids, p)
		extra = append(extra, reconcile.ProductKeys(p)...)
	}
	if err := stock.Purge(context.Background(), rdb, ids, extra...); err != nil {
		t.Logf("cleaning up products %v: %v", ids, err)
	}
}

// runCommand runs the command with args and returns its JSON report.
func runCommand(t *testing.T, getenv func(string) string, args ...string) (harness.Report, []byte, error) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "report.json")
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), append([]string{"loadtest", "-json", out}, args...), getenv, strings.NewReader(""), &stdout, &stderr)
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	b, rerr := os.ReadFile(out)
	if rerr != nil {
		t.Fatalf("no JSON report (run: %v): %v", err, rerr)
	}
	var rep harness.Report
	if jerr := json.Unmarshal(b, &rep); jerr != nil {
		t.Fatalf("decoding the JSON report: %v\n%s", jerr, b)
	}
	return rep, b, err
}

func verdicts(rows []harness.Row) []string {
	var v []string
	for _, r := range rows {
		v = append(v, r.Verdict+"/"+strconv.FormatBool(r.Agree))
	}
	return v
}

func TestOversellScenario(t *testing.T) {
	product := testenv.ProductID(t)
	getenv := backends(t, product, 1)
	rep, raw, err := runCommand(t, getenv, "-scenario", "oversell", "-product", strconv.FormatInt(product, 10),
		"-stock", "20", "-buyers", "200", "-concurrency", "40")
	if err != nil {
		t.Fatalf("scenario oversell: %v", err)
	}
	if got := verdicts(rep.Rows); len(got) != 1 || got[0] != "OVERSOLD/true" {
		t.Fatalf("verdicts %v, want [OVERSOLD/true]", got)
	}
	if r := rep.Rows[0]; r.Oversold == 0 || r.Sold != r.OK || r.Requests != 200 {
		t.Errorf("row %+v: want units oversold, sold = ok, 200 requests", r)
	}
	if rep.Machine.Go == "" || rep.Machine.Redis == "" || rep.Machine.SQL == "" || rep.Machine.Cores == 0 {
		t.Errorf("machine %+v: want Go, Redis, SQL versions and cores stated", rep.Machine)
	}

	// The JSON output round-trips: decoded and written again, it is the same.
	var again bytes.Buffer
	if err := rep.WriteJSON(&again); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw, again.Bytes()) {
		t.Errorf("the JSON report does not round-trip:\nwrote %s\nagain %s", raw, again.Bytes())
	}
}

// An async run counts its 202s as sales, waits for the queue to drain,
// and judges the orders written: exactly the stock, SAFE, with the time
// from 202 to row reported.
func TestAsyncRunDrainsBeforeItIsJudged(t *testing.T) {
	product := testenv.ProductID(t)
	getenv := backends(t, product, 1)
	rep, _, err := runCommand(t, getenv, "-lock", "none", "-mode", "async", "-product", strconv.FormatInt(product, 10),
		"-stock", "50", "-buyers", "200", "-concurrency", "40")
	if err != nil {
		t.Fatalf("async run: %v", err)
	}
	if got := verdicts(rep.Rows); len(got) != 1 || got[0] != "SAFE/true" {
		t.Fatalf("verdicts %v, want [SAFE/true]", got)
	}
	if r := rep.Rows[0]; r.OK != 50 || r.Accepted != 50 || r.Sold != 50 || r.DrainP99MS <= 0 {
		t.Errorf("row %+v: want 50 sales, all queued (202), 50 written, a drain latency", r)
	}
}

func TestCrossProcessScenario(t *testing.T) {
	product := testenv.ProductID(t)
	getenv := backends(t, product, 2)
	rep, _, err := runCommand(t, getenv, "-scenario", "cross-process", "-product", strconv.FormatInt(product, 10),
		"-stock", "30", "-buyers", "300", "-concurrency", "30")
	if err != nil {
		t.Fatalf("scenario cross-process: %v", err)
	}
	want := []string{"OVERSOLD/true", "SAFE/true"}
	if got := verdicts(rep.Rows); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("verdicts %v, want %v (local over 3 processes oversells, token does not)", got, want)
	}
	for _, r := range rep.Rows {
		if r.Instances != 3 {
			t.Errorf("%s ran on %d instances, want 3", r.Label(), r.Instances)
		}
	}
}

func TestExpectSafeFailsOnOversell(t *testing.T) {
	product := testenv.ProductID(t)
	getenv := backends(t, product, 1)
	rep, _, err := runCommand(t, getenv, "-lock", "none", "-mode", "rmw", "-hold", "2ms", "-stock", "20",
		"-buyers", "200", "-concurrency", "40", "-product", strconv.FormatInt(product, 10), "-expect", "safe")
	if !errors.Is(err, errExpectation) {
		t.Fatalf("-expect safe on an oversell: err = %v, want errExpectation", err)
	}
	if len(rep.Rows) != 1 || rep.Rows[0].Verdict != harness.Oversold {
		t.Errorf("verdicts %v, want [OVERSOLD]", verdicts(rep.Rows))
	}
}

func TestUnknownLockIsReportedNotFatal(t *testing.T) {
	product := testenv.ProductID(t)
	getenv := backends(t, product, 2)
	rep, _, err := runCommand(t, getenv, "-lock", "no-such-lock,token", "-stock", "5", "-buyers", "10",
		"-concurrency", "5", "-product", strconv.FormatInt(product, 10))
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if got := verdicts(rep.Rows); strings.Join(got, " ") != "SKIPPED/false SAFE/true" {
		t.Fatalf("verdicts %v, want the unknown lock SKIPPED and token SAFE", got)
	}
	if !strings.Contains(rep.Rows[0].Note, "400") {
		t.Errorf("note %q: want the service's 400", rep.Rows[0].Note)
	}
}

// Without fallback, 7 buyers over 5 shards of 2,2,1,1,1 put two buyers on a
// shard of 1: one is told sold out while a unit waits elsewhere. Repeated,
// every run says so, and the summary counts it.
func TestNoFallbackScenarioRepeated(t *testing.T) {
	product := testenv.ProductID(t)
	getenv := backends(t, product, 6)
	rep, _, err := runCommand(t, getenv, "-scenario", "no-fallback", "-repeat", "2", "-product", strconv.FormatInt(product, 10))
	if err != nil {
		t.Fatalf("scenario no-fallback: %v", err)
	}
	want := []string{"UNDERSOLD/true", "SAFE/true", "SAFE/true", "UNDERSOLD/true", "SAFE/true", "SAFE/true"}
	if got := verdicts(rep.Rows); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("verdicts %v, want %v", got, want)
	}
	if r := rep.Rows[0]; r.Undersold == 0 || r.SoldOut == 0 || r.Sold+r.Undersold != 7 {
		t.Errorf("row %+v: want buyers told sold out and the units they missed counted as undersold", r)
	}
	// One at a time, 100 buyers drain every shard, but the 7th, 8th and 9th
	// find theirs empty before the 10th takes the last unit elsewhere.
	if r := rep.Rows[2]; r.SoldOutEarly != 3 || r.Undersold != 0 {
		t.Errorf("row %+v: want 3 buyers told sold out early and nothing left unsold", r)
	}
	if r := rep.Rows[1]; r.SoldOutEarly != 0 {
		t.Errorf("with fallback, %d buyers told sold out early: want none", r.SoldOutEarly)
	}
	for _, line := range []string{
		"token/rmw 5sh no-fallback: 4 runs: SAFE 2, UNDERSOLD 2; oversold units 0; told sold out early 6; expectation held 4/4",
		"token/rmw 5sh: 2 runs: SAFE 2; oversold units 0; expectation held 2/2",
	} {
		if !slices.Contains(rep.Summary, line) {
			t.Errorf("summary %q lacks %q", rep.Summary, line)
		}
	}
}

// -no-fallback applies to a scenario's runs too: the run that expects
// fallback to save the sale then undersells, and the expectation fails.
func TestNoFallbackFlagOverridesScenario(t *testing.T) {
	product := testenv.ProductID(t)
	getenv := backends(t, product, 3)
	rep, _, err := runCommand(t, getenv, "-scenario", "no-fallback", "-no-fallback", "-product", strconv.FormatInt(product, 10))
	if !errors.Is(err, errExpectation) {
		t.Fatalf("err = %v, want errExpectation", err)
	}
	if got := verdicts(rep.Rows); len(got) != 3 || got[1] != "UNDERSOLD/true" {
		t.Errorf("verdicts %v: want the second run, fallback forced off, UNDERSOLD", got)
	}
}

func TestLuaCeilingReportsTheRatios(t *testing.T) {
	product := testenv.ProductID(t)
	getenv := backends(t, product, 4)
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"loadtest", "-ceiling", "-selftest-rounds", "1", "-selftest-duration", "300ms",
		"-concurrency", "8", "-product", strconv.FormatInt(product, 10)}, getenv, strings.NewReader(""), &stdout, &stderr)
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	if err != nil {
		t.Fatalf("-ceiling: %v", err)
	}
	for _, want := range []string{"machine: ", "verdict SAFE", "bare EVALSHA", "service lua / this = ", "service async / this = ",
		"the 70% target", "+INCR+INSERT", "orders/s written by the consumers", "the 3× target",
		"service async+writes / this = ", "the 50% target", "orders/s answered and written (", "req/s during the load alone)",
		"bare 409", "service sold-out refusals / this = ", "the 80% target"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("the output lacks %q", want)
		}
	}
}

// -ceiling's refusals go to signed-in buyers of a public product sold out
// before the rounds, in the lua mode whatever -mode is, and to the bare 409
// handler: every answer of every round is 409 sold_out.
func TestCeilingRefusalsAreAllSoldOut(t *testing.T) {
	product := testenv.ProductID(t)
	getenv := backends(t, product, 2*5+1) // 2 rounds of 5 sides, and the refusals' product
	var stdout, stderr bytes.Buffer
	o, err := parseFlags([]string{"loadtest", "-ceiling", "-mode", "async", "-selftest-rounds", "2", "-selftest-duration", "200ms",
		"-concurrency", "8", "-product", strconv.FormatInt(product, 10)}, getenv, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	r, err := measureCeiling(t.Context(), o, getenv, &stdout, &stderr)
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	if err != nil {
		t.Fatalf("-ceiling: %v", err)
	}
	f := r.refusals
	if f == nil {
		t.Fatal("no refusals measured")
	}
	if f.mode != api.ModeLua || len(f.signed) != refusalBuyers {
		t.Errorf("the product sold in %q to %d buyers: want %q, %d", f.mode, len(f.signed), api.ModeLua, refusalBuyers)
	}
	if len(r.accounts) != refusalBuyers+1 {
		t.Errorf("%d accounts to clean up, want %d", len(r.accounts), refusalBuyers+1)
	}
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		if n, err := rdb.Exists(t.Context(), session.MarkKeys(r.accounts...)...).Result(); err != nil || n != 0 {
			t.Errorf("%d of the run's %d account marks left in Redis (%v): want none", n, len(r.accounts), err)
		}
	}
	for name, rows := range map[string][]harness.Row{f.service.name: f.serviceRows, f.bare.name: f.bareRows} {
		if len(rows) != 2 {
			t.Errorf("%s: %d rounds, want 2", name, len(rows))
		}
		for i, row := range rows {
			if row.Requests == 0 || row.SoldOut != row.Requests {
				t.Errorf("%s, round %d: %d of %d answers 409 sold_out (%v): want every one", name, i+1, row.SoldOut, row.Requests, row.ErrorCodes)
			}
		}
	}
}

// -h prints the knobs and succeeds, so that main exits 0; a flag that does
// not exist is an error.
func TestHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"/tmp/build/loadtest", "-h"}, os.Getenv, strings.NewReader(""), &stdout, &stderr); err != nil {
		t.Errorf("-h returned %v, want nil", err)
	}
	for _, want := range []string{"Usage of loadtest:", "-scenario", "-product", "-target"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("-h output lacks %q:\n%s", want, stderr.String())
		}
	}
	err := run(t.Context(), []string{"loadtest", "-no-such-flag"}, os.Getenv, strings.NewReader(""), &stdout, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "no-such-flag") {
		t.Errorf("-no-such-flag returned %v, want an error naming it", err)
	}
}

// startTarget starts a service instance as an operator would, with the
// service's own per-user rate limit (one order request per 3s), and returns
// its URL for -target.
func startTarget(t *testing.T, getenv func(string) string) string {
	t.Helper()
	cfg, err := serviceConfig(getenv, 0, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	cfg.RateLimit = 3 * time.Second
	return testenv.Start(t, cfg, app.Extras{}).URL
}

// Two runs against one rate-limited target, on the same product, one right
// after the other: each run's buyers are users of its own, so neither meets
// the rate limit, and the runs say which users they were.
func TestTargetRunsAgainTakeFreshBuyers(t *testing.T) {
	product := testenv.ProductID(t)
	getenv := backends(t, product, 1)
	target := startTarget(t, getenv)
	var bases []int64
	for run := range 2 {
		rep, _, err := runCommand(t, getenv, "-target", target, "-product", strconv.FormatInt(product, 10),
			"-stock", "5", "-buyers", "20", "-concurrency", "5")
		if err != nil {
			t.Fatalf("run %d against the target: %v", run+1, err)
		}
		if len(rep.Rows) != 1 {
			t.Fatalf("run %d: %d rows, want 1", run+1, len(rep.Rows))
		}
		r := rep.Rows[0]
		if r.Verdict != harness.Safe || r.Errors != 0 || r.OK != 5 {
			t.Errorf("run %d: verdict %s, %d errors %v, %d sold: want SAFE, no error, 5 sold", run+1, r.Verdict, r.Errors, r.ErrorCodes, r.OK)
		}
		if r.UserBase == 0 || r.Buyers != 20 {
			t.Errorf("run %d: user base %d, buyers %d: want the users stated", run+1, r.UserBase, r.Buyers)
		}
		bases = append(bases, r.UserBase)
	}
	if bases[0] == bases[1] {
		t.Errorf("both runs used users from %d", bases[0])
	}
}

// A target that refuses every order fails the command, which says why.
func TestAllRequestsFailedIsAnError(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/products", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("POST /api/orders", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"code":"rate_limited","error":"one order request per user per 3s"}`)
	})
	mux.HandleFunc("GET /api/products/{id}/audit", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"initial":5,"remaining":5,"orders":0,"verdict":"OK"}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	rep, _, err := runCommand(t, os.Getenv, "-target", srv.URL, "-stock", "5", "-buyers", "10", "-concurrency", "2")
	if !errors.Is(err, errAllFailed) {
		t.Fatalf("err = %v, want errAllFailed", err)
	}
	for _, want := range []string{"token/rmw", "rate_limited 10", "one order request per user", "-rate-limit 0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error %q lacks %q", err, want)
		}
	}
	if len(rep.Rows) != 1 || rep.Rows[0].Errors != 10 {
		t.Errorf("rows %+v: want one row of 10 errors", rep.Rows)
	}
}

// The pay-vs-timeout race, both lifecycles: naive (read, pause, write)
// lets a payment and the timeout both win, and a unit is paid for and back
// on sale; the conditional update lets exactly one win each order.
func TestPayVsTimeoutScenario(t *testing.T) {
	product := testenv.ProductID(t)
	getenv := backends(t, product, 2)
	rep, _, err := runCommand(t, getenv, "-scenario", "pay-vs-timeout", "-product", strconv.FormatInt(product, 10))
	if err != nil {
		t.Fatalf("scenario pay-vs-timeout: %v", err)
	}
	if got, want := verdicts(rep.Rows), []string{"OVERSOLD/true", "SAFE/true"}; !slices.Equal(got, want) {
		t.Fatalf("verdicts %v, want %v", got, want)
	}
	naive, conditional := rep.Rows[0], rep.Rows[1]
	if naive.Lifecycle != "naive" || naive.PaidAndReturned == 0 {
		t.Errorf("naive row %+v: want units both paid for and returned", naive)
	}
	c := conditional
	if c.Lifecycle != "conditional" || c.PaidAndReturned != 0 || c.LostUpdates != 0 || c.PaidOK+c.PayRefused != c.OK || c.OK != c.Stock {
		t.Errorf("conditional row %+v: want every order bought, each payment answered 200 or order_cancelled, none both", c)
	}
}

// The fault scenarios strike the processes the command started, in the
// middle of each run: an instance killed (its stranded units returned by the
// reconciler before the audit), the run's own Redis paused, an instance
// paused past its lease. Each row's expectation must hold, and the two
// sides of each verdict agree; the pause's token and watchdog must each
// oversell in at least one of their runs (the command fails otherwise).
func TestFaultScenarios(t *testing.T) {
	for _, tc := range []struct {
		name string
		runs int
	}{{"instance-kill", 2}, {"redis-pause", 2}, {"pause", 21}} {
		t.Run(tc.name, func(t *testing.T) {
			product := testenv.ProductID(t)
			getenv := backends(t, product, tc.runs)
			rep, _, err := runCommand(t, getenv, "-scenario", tc.name, "-product", strconv.FormatInt(product, 10))
			if err != nil {
				t.Fatalf("scenario %s: %v", tc.name, err)
			}
			if len(rep.Rows) != tc.runs {
				t.Fatalf("%d rows, want %d", len(rep.Rows), tc.runs)
			}
			for _, r := range rep.Rows {
				if r.Verdict == harness.Skipped || r.Expect == nil || !r.Expect.Held || !r.Agree {
					t.Errorf("%s: %s (%s), agree %v %v", r.Label(), r.Verdict, r.Note, r.Agree, r.Disagreements)
				}
			}
			if tc.name == "pause" {
				var across []string
				for _, l := range rep.Summary {
					if strings.HasPrefix(l, "across the runs of ") {
						across = append(across, l)
					}
				}
				if len(across) != 2 || !strings.HasSuffix(across[0], "— held") || !strings.HasSuffix(across[1], "— held") {
					t.Errorf("summary %q: want token's and watchdog's oversells counted across their runs, and enough", rep.Summary)
				}
			}
			if tc.name == "instance-kill" {
				for _, r := range rep.Rows {
					if r.ErrorCodes["transport"] == 0 || r.LostUpdates != 0 {
						t.Errorf("%s: errors %v, lost updates %d: want the killed instance's clients unanswered and no unit lost",
							r.Label(), r.ErrorCodes, r.LostUpdates)
					}
				}
			}
		})
	}
}

// Against -target instances the command did not start, it cannot strike
// them: the fault scenarios' runs are SKIPPED, saying why.
func TestFaultScenarioSkippedOnTarget(t *testing.T) {
	product := testenv.ProductID(t)
	getenv := backends(t, product, 2)
	target := startTarget(t, getenv)
	rep, _, err := runCommand(t, getenv, "-scenario", "instance-kill", "-target", target, "-product", strconv.FormatInt(product, 10))
	if err != nil {
		t.Fatalf("scenario instance-kill against a target: %v", err)
	}
	for _, r := range rep.Rows {
		if r.Verdict != harness.Skipped || !strings.Contains(r.Note, "-target") {
			t.Errorf("%s: %s (%s), want SKIPPED because the target's processes are not the command's", r.Label(), r.Verdict, r.Note)
		}
	}
}

// The clock-jump drill runs from the command line like a scenario, prints a
// row per run and a count per variant, and refuses flags it cannot honour.
func TestClockJumpDrill(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"loadtest", "-scenario", "clock-jump"}, os.Getenv, strings.NewReader(""), &stdout, &stderr)
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	if err != nil {
		t.Fatalf("scenario clock-jump: %v", err)
	}
	for _, want := range []string{
		"5 nodes, clocks steady: OK×1 1/1",
		"5 nodes, one clock jumps: OVERSOLD×1 1/1",
		"7 nodes, one clock jumps: OVERSOLD×1 1/1",
		"5 nodes, one jumps, fenced: OK×1 1/1",
	} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	err = run(t.Context(), []string{"loadtest", "-scenario", "clock-jump", "-json", "-"}, os.Getenv, strings.NewReader(""), &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "-json does not apply") {
		t.Errorf("with -json: %v, want refused", err)
	}
}

// -gate compares the sold-out gate's refusals with the service's: every
// side refuses every request, and the gate answers its own side's.
func TestGateBench(t *testing.T) {
	var help bytes.Buffer
	if err := run(t.Context(), []string{"loadtest", "-h"}, os.Getenv, strings.NewReader(""), io.Discard, &help); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(help.String(), "-gate") {
		t.Errorf("-h does not list -gate:\n%s", help.String())
	}
	t.Run("nginx", func(t *testing.T) {
		if _, _, err := gate.FindNginx(); err != nil {
			testkit.Skipf(t, testkit.NoNginx, "needs nginx and libnginx-mod-http-lua: %v", err)
		}
		product := testenv.ProductID(t)
		getenv := backends(t, product, 4)
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), []string{"loadtest", "-gate", "-selftest-rounds", "1", "-selftest-duration", "300ms",
			"-concurrency", "8", "-product", strconv.FormatInt(product, 10)}, getenv, strings.NewReader(""), &stdout, &stderr)
		t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
		if err != nil {
			t.Fatalf("-gate: %v", err)
		}
		out := stdout.String()
		for _, want := range []string{"machine: ", "gate (nginx+Lua):", "nginx → service:", "service direct:", "the gate answers"} {
			if !strings.Contains(out, want) {
				t.Errorf("the output lacks %q", want)
			}
		}
		// The gate's own round: every request answered by the gate.
		for _, line := range strings.Split(out, "\n") {
			var reqs, answered int
			_, rest, ok := strings.Cut(line, "refusals/s (")
			if strings.HasPrefix(line, "round") && strings.Contains(line, "gate (nginx+Lua):") && ok {
				if _, err := fmt.Sscanf(rest, "%d requests, %d answered by the gate", &reqs, &answered); err != nil {
					t.Fatalf("line %q: %v", line, err)
				}
				if reqs == 0 || answered < reqs-1 {
					t.Errorf("the gate answered %d of its %d requests; want all (one may pass once a learned entry expires)", answered, reqs)
				}
			}
		}
	})
}

// The opening second: three openings of a product with a window, each
// exact, nobody misled, no click before the second sold; early clickers
// told not_started; with -path each buyer buys through a path token.
func TestOpeningScenario(t *testing.T) {
	for _, path := range []bool{false, true} {
		t.Run(fmt.Sprintf("path=%v", path), func(t *testing.T) {
			product := testenv.ProductID(t)
			args := []string{"loadtest", "-scenario", "opening", "-buyers", "400", "-stock", "60", "-product", strconv.FormatInt(product, 10)}
			if path {
				args = append(args, "-path")
			}
			var out, errs bytes.Buffer
			if err := run(t.Context(), args, backends(t, product, 3), strings.NewReader(""), &out, &errs); err != nil {
				t.Fatalf("%v\n%s\n%s", err, out.String(), errs.String())
			}
			report := out.String()
			for _, want := range []string{"what each opening's clicks were told", "warm against cold", "verdicts", "who bought, in click order", "  cold: "} {
				if !strings.Contains(report, want) {
					t.Errorf("the report lacks %q:\n%s", want, report)
				}
			}
			verdictOK := regexp.MustCompile(`(?m)^ *(warm|cold|warm, no fallback) +OK +`)
			soldOut := regexp.MustCompile(`(?m)^ *(warm|cold|warm, no fallback) +\d+\.\d +`) // the how-fast table's sold out
			if len(verdictOK.FindAllString(report, -1)) != 3 || len(soldOut.FindAllString(report, -1)) != 3 {
				t.Errorf("want three exact openings, each selling out:\n%s", report)
			}
			// Issue 41: progress was shown only while signing buyers in.
			for _, phase := range []string{"signing in", "opening warm", "opening cold", "opening warm, no fallback"} {
				if !regexp.MustCompile(`(?m)^` + phase + ` +ok \d+`).MatchString(errs.String()) {
					t.Errorf("no progress of phase %q on stderr:\n%s", phase, errs.String())
				}
			}
		})
	}
}

// Overload: the capacity measured closed-loop, then two floods at three
// times it, one on an instance whose limit is 1 and one on an instance
// with none. The first must shed (its limit admits one purchase at a
// time), the second never; both exact, nobody misled, every answer one
// item 7 allows.
func TestOverloadScenario(t *testing.T) {
	product := testenv.ProductID(t)
	args := []string{"loadtest", "-scenario", "overload", "-buyers", "100", "-duration", "1s", "-concurrency-limit", "1",
		"-product", strconv.FormatInt(product, 10)}
	var out, errs bytes.Buffer
	if err := run(t.Context(), args, backends(t, product, 1), strings.NewReader(""), &out, &errs); err != nil {
		t.Fatalf("%v\n%s\n%s", err, out.String(), errs.String())
	}
	report := out.String()
	if !strings.Contains(report, "overload: capacity ") {
		t.Errorf("the report does not say the capacity:\n%s", report)
	}
	answers := tableRows(t, report, "what each flood's asks were told")
	targets := tableRows(t, report, "issue 21's targets (item 7), met or missed")
	for _, f := range []string{"limit 1", "no limit"} {
		// asks, bought, sold out, not open, already, refused, shed, …
		if len(answers[f]) != 10 || len(targets[f]) != 8 {
			t.Fatalf("flood %q has no row in the answers' or the targets' table:\n%s", f, report)
		}
		shed := answers[f][6]
		if (f == "limit 1") != (shed != "0") {
			t.Errorf("flood %q shed %s: the instance limited to one purchase at a time must shed at three times its capacity, the other never:\n%s", f, shed, report)
		}
		if notMeant := targets[f][6]; notMeant != "0" {
			t.Errorf("flood %q: %s answers item 7 does not allow:\n%s", f, notMeant, report)
		}
	}
	audits := tableRows(t, report, "the shelf's audit, both floods and the closed loop")
	if len(audits) != 1 {
		t.Errorf("want one row in the shelf's audit, got %d:\n%s", len(audits), report)
	}
	for _, audit := range audits {
		// initial, remaining, orders, oversold, lost upd, not exact, misled, verdict
		if len(audit) != 8 || audit[5] != "0" || audit[6] != "0" || audit[7] != api.VerdictOK {
			t.Errorf("want an exact shelf, nobody misled:\n%s", report)
		}
	}
	// Issue 41: progress was shown only while signing buyers in.
	for _, phase := range []string{"signing in", `. capacity`, "making products", "flood limit 1", "flood no limit", "auditing products"} {
		if !regexp.MustCompile(`(?m)^` + phase + ` +ok \d+`).MatchString(errs.String()) {
			t.Errorf("no progress of phase %q on stderr:\n%s", phase, errs.String())
		}
	}
}

// The curves scenario runs the shards sweep on one instance and the
// instances sweep on one to four, every run exact, and says each curve in
// its summary; -html draws them.
func TestCurvesScenario(t *testing.T) {
	product := testenv.ProductID(t)
	page := filepath.Join(t.TempDir(), "curves.html")
	runs := len(curveInstances) + len(curveKinds)*len(curveShards)
	args := []string{"loadtest", "-scenario", "curves", "-buyers", "60", "-concurrency", "20", "-html", page, "-product", strconv.FormatInt(product, 10)}
	var out, errs bytes.Buffer
	if err := run(t.Context(), args, backends(t, product, runs), strings.NewReader(""), &out, &errs); err != nil {
		t.Fatalf("%v\n%s\n%s", err, out.String(), errs.String())
	}
	report := out.String()
	for _, want := range []string{
		"against shards, token/rmw hold 1ms: 1 → ", "32 ÷ 1 = ",
		"against shards, none/lua: 1 → ",
		"against service instances, none/lua: 1 → ", "4 ÷ 1 = ",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("the report lacks %q:\n%s", want, report)
		}
	}
	if n := len(regexp.MustCompile(`SAFE +SAFE +yes`).FindAllString(report, -1)); n != runs {
		t.Errorf("%d runs SAFE with the audit agreeing, want %d:\n%s", n, runs, report)
	}
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"shards-rps", "shards-p99", "instances-rps", "instances-p99"} {
		if !strings.Contains(string(html), `data-curve="`+id+`"`) {
			t.Errorf("the HTML report draws no %s curve", id)
		}
	}
}
