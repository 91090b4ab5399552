package lab

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"seckill/internal/api"
	"seckill/internal/lab/harness"
)

const target = "http://127.0.0.1:1"

// open returns a Lab closed when the test ends.
func open(t *testing.T, opt Options) *Lab {
	t.Helper()
	l := New(opt)
	t.Cleanup(func() { l.Close() })
	return l
}

// waitFinished polls the run until it is no longer running.
func waitFinished(t *testing.T, l *Lab, id string) api.Run {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		r, err := l.Get(id)
		if err != nil {
			t.Fatalf("Get(%s): %v", id, err)
		}
		if r.Status != api.RunRunning && r.Status != api.RunQueued {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s still queued or running after 30s: %+v", id, r)
		}
		<-tick.C
	}
}

// instant is a runner that reports full progress and a SAFE row at once.
func instant(_ context.Context, s harness.Spec, progress func(harness.Progress)) (harness.Row, error) {
	progress(harness.Progress{RunProgress: api.RunProgress{Total: s.Requests, Done: s.Requests, OK: s.Stock}})
	return harness.Row{RunResult: api.RunResult{
		Strategy: s.Lock, Mode: s.Mode, Instances: 1, Stock: s.Stock, Shards: s.Shards,
		Concurrency: s.Concurrency, Requests: s.Requests, OK: s.Stock, SoldOut: s.Requests - s.Stock,
		Sold: s.Stock, Verdict: harness.Safe, AuditVerdict: harness.Safe, Agree: true,
	}, Timeline: &api.Timeline{Shards: s.Shards, Sentence: "user base " + strconv.FormatInt(s.UserBase, 10)}}, nil
}

// TestTimelinesOfTheLastRunsAreKept: a finished run's timeline is its own,
// until KeepTimelines later runs have pushed it out.
func TestTimelinesOfTheLastRunsAreKept(t *testing.T) {
	l := open(t, Options{Run: instant})
	var ids []string
	for range KeepTimelines + 1 {
		r, err := l.Start(t.Context(), api.RunSpec{}, target, "")
		if err != nil {
			t.Fatal(err)
		}
		waitFinished(t, l, r.ID)
		ids = append(ids, r.ID)
	}
	if _, err := l.Timeline(ids[0]); !errors.Is(err, ErrNotFound) {
		t.Errorf("the timeline of the run %d runs ago: %v, want ErrNotFound", KeepTimelines, err)
	}
	last := ids[len(ids)-1]
	tl, err := l.Timeline(last)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(last)
	if want := "user base " + strconv.Itoa(userBase+n*userSpan); tl.Sentence != want {
		t.Errorf("run %s's timeline says %q, want its own (%q)", last, tl.Sentence, want)
	}
}

// blocking is a runner that holds its run until released or cancelled.
type blocking struct {
	started chan harness.Spec
	release chan struct{}
}

func newBlocking() *blocking {
	return &blocking{started: make(chan harness.Spec, 1), release: make(chan struct{})}
}

func (b *blocking) run(ctx context.Context, s harness.Spec, _ func(harness.Progress)) (harness.Row, error) {
	b.started <- s
	select {
	case <-b.release:
		return instant(ctx, s, func(harness.Progress) {})
	case <-ctx.Done():
		return harness.Row{RunResult: api.RunResult{Strategy: s.Lock, Mode: s.Mode}}, ctx.Err()
	}
}

func TestStartRejectsBadSpecs(t *testing.T) {
	ran := make(chan struct{}, 1)
	l := open(t, Options{Run: func(ctx context.Context, s harness.Spec, p func(harness.Progress)) (harness.Row, error) {
		ran <- struct{}{}
		return instant(ctx, s, p)
	}})
	for _, tc := range []struct {
		name string
		spec api.RunSpec
		want string // a part of the error message
	}{
		{"unknown lock", api.RunSpec{Lock: "magic"}, `lock: "magic" is not a registered strategy`},
		{"unknown mode", api.RunSpec{Mode: "cas"}, `mode: "cas" is not one of rmw, lua, db`},
		{"unknown fault", api.RunSpec{Fault: "meteor"}, `fault: "meteor"`},
		{"negative stock", api.RunSpec{Stock: -1}, "stock: -1 is out of range"},
		{"stock over the limit", api.RunSpec{Stock: 10001}, "stock: 10001 is out of range; it must be between 1 and 10000"},
		{"buyers over the limit", api.RunSpec{Buyers: 20001}, "buyers: 20001 is out of range"},
		{"requests over the limit", api.RunSpec{Buyers: 10, Requests: 20001}, "requests: 20001 is out of range"},
		{"concurrency over the limit", api.RunSpec{Concurrency: 257}, "concurrency: 257 is out of range; it must be between 1 and 256"},
		{"negative concurrency", api.RunSpec{Concurrency: -4}, "concurrency: -4 is out of range"},
		{"hold over the limit", api.RunSpec{HoldMS: 2001}, "hold_ms: 2001 is out of range"},
		{"negative hold", api.RunSpec{HoldMS: -1}, "hold_ms: -1 is out of range"},
		{"too many shards", api.RunSpec{Shards: 65}, "shards: 65 is out of range"},
		{"more faulty requests than requests", api.RunSpec{Buyers: 10, Fault: api.FaultAbandon, FaultRequests: 11}, "fault_requests: 11 is out of range"},
		{"a seat with a space", api.RunSpec{Seat: "seat 1"}, `seat: "seat 1" is not up to 64 letters`},
		{"a seat too long", api.RunSpec{Seat: strings.Repeat("a", api.MaxSeatLen+1)}, "seat:"},
		{"a student's name too long", api.RunSpec{Student: strings.Repeat("é", api.MaxStudentLen+1)}, "student: a name of up to 40 characters"},
		{"a student's name with a newline", api.RunSpec{Student: "ana\nbob"}, "without control characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.Start(t.Context(), tc.spec, target, "")
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrInvalid with %q", err, tc.want)
			}
		})
	}
	select {
	case <-ran:
		t.Error("a rejected spec started a run")
	default:
	}
}

func TestSpecLimitsAreInclusive(t *testing.T) {
	for _, s := range []api.RunSpec{
		{Stock: api.MaxRunStock, Buyers: api.MaxRunBuyers, Requests: api.MaxRunRequests, Concurrency: api.MaxRunConcurrency, HoldMS: api.MaxRunHoldMS, Shards: api.MaxShards},
		{Stock: 1, Buyers: 1, Requests: 1, Concurrency: 1, HoldMS: 0, Shards: 1, Fault: api.FaultAbandon, FaultRequests: 1},
	} {
		if _, err := check(s); err != nil {
			t.Errorf("%+v: %v", s, err)
		}
	}
}

func TestHappyPathReachesDone(t *testing.T) {
	var got []harness.Spec
	l := open(t, Options{ProductID: 4242, Timeout: 7 * time.Second, Run: func(ctx context.Context, s harness.Spec, p func(harness.Progress)) (harness.Row, error) {
		got = append(got, s) // runs are sequential: waitFinished orders them
		return instant(ctx, s, p)
	}})

	started, err := l.Start(t.Context(), api.RunSpec{Lock: "none", Mode: "rmw", Stock: 50, Buyers: 300, Concurrency: 64, HoldMS: 2}, target, "s3cret")
	if err != nil || started.Status != api.RunRunning || started.ID == "" {
		t.Fatalf("Start: %+v %v, want running with an id", started, err)
	}
	wantSpec := api.RunSpec{Lock: "none", Mode: "rmw", Shards: 5, Stock: 50, Buyers: 300, Requests: 300, Concurrency: 64, HoldMS: 2, Fault: "none"}
	if diff := cmp.Diff(wantSpec, started.Spec); diff != "" {
		t.Errorf("spec with defaults (-want +got):\n%s", diff)
	}

	done := waitFinished(t, l, started.ID)
	if done.Status != api.RunDone || done.Error != "" || done.Result == nil {
		t.Fatalf("finished run: %+v, want done with a result", done)
	}
	if done.Result.Verdict != harness.Safe || done.Result.Strategy != "none" || done.Product != 4242 {
		t.Errorf("result: %+v on product %d", *done.Result, done.Product)
	}
	if done.Progress != (api.RunProgress{Done: 300, Total: 300, OK: 50}) {
		t.Errorf("progress: %+v", done.Progress)
	}

	// A second run starts once the first is over, and the list holds both.
	second, err := l.Start(t.Context(), api.RunSpec{Lock: "token"}, target, "s3cret")
	if err != nil {
		t.Fatalf("second Start: %v", err)
	}
	waitFinished(t, l, second.ID)
	if list := l.List(""); len(list) != 2 || list[0].ID != started.ID || list[1].ID != second.ID {
		t.Errorf("list: %+v, want runs %s then %s", list, started.ID, second.ID)
	}

	// What the harness was told: the target, the lab's product, the
	// token, the time limit, and users of its own for each run.
	first := got[0]
	if len(first.Targets) != 1 || first.Targets[0] != target || first.ProductID != 4242 ||
		first.AdminToken != "s3cret" || time.Duration(first.Timeout) != 7*time.Second ||
		first.Hold != harness.Duration(2*time.Millisecond) || first.Lock != "none" {
		t.Errorf("harness spec: %+v", first)
	}
	if lo, hi := got[1].UserBase, got[1].UserBase+int64(got[1].Buyers); lo < first.UserBase+int64(first.Buyers) && hi > first.UserBase {
		t.Errorf("runs share user ids: %d+%d and %d+%d", first.UserBase, first.Buyers, got[1].UserBase, got[1].Buyers)
	}
}

func TestConfiguredTargetWins(t *testing.T) {
	specs := make(chan harness.Spec, 1)
	l := open(t, Options{Target: "http://lb:8080", Run: func(ctx context.Context, s harness.Spec, p func(harness.Progress)) (harness.Row, error) {
		specs <- s
		return instant(ctx, s, p)
	}})
	if _, err := l.Start(t.Context(), api.RunSpec{}, target, ""); err != nil {
		t.Fatal(err)
	}
	if s := <-specs; len(s.Targets) != 1 || s.Targets[0] != "http://lb:8080" {
		t.Errorf("targets %q, want the configured one", s.Targets)
	}
	if _, err := open(t, Options{Run: instant}).Start(t.Context(), api.RunSpec{}, "", ""); !errors.Is(err, ErrNoTarget) {
		t.Errorf("Start with no target at all: %v, want ErrNoTarget", err)
	}
}

func TestFaultsReachTheHarness(t *testing.T) {
	for _, tc := range []struct {
		fault string
		want  harness.Spec
	}{
		{api.FaultNone, harness.Spec{}},
		{api.FaultAbandon, harness.Spec{Abandon: true, FaultRequests: 1}},
		{api.FaultCrashBeforeExpire, harness.Spec{CrashBeforeExpire: true, FaultRequests: 1}},
		{api.FaultClockSkew, harness.Spec{ClockSkew: harness.Duration(ClockSkew), FaultRequests: 1}},
	} {
		s, err := check(api.RunSpec{Fault: tc.fault, FaultRequests: tc.want.FaultRequests})
		if err != nil {
			t.Fatalf("%s: %v", tc.fault, err)
		}
		h := toHarness(s, "http://x", 1, 0, time.Second)
		got := harness.Spec{Abandon: h.Abandon, CrashBeforeExpire: h.CrashBeforeExpire, ClockSkew: h.ClockSkew, FaultRequests: h.FaultRequests}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.fault, diff)
		}
	}
}

// TestRunsQueueBehindTheOneGoing: a class shares one lab. A run started
// while another goes waits with its place in the queue, runs in the order
// it came, and is listed to its seat alone or, without a seat, to the
// teacher with everyone's; a full queue refuses, naming the run going.
func TestRunsQueueBehindTheOneGoing(t *testing.T) {
	b := newBlocking()
	l := open(t, Options{Run: b.run})
	first, err := l.Start(t.Context(), api.RunSpec{Seat: "teacher"}, target, "")
	if err != nil || first.Status != api.RunRunning || first.Place != 0 {
		t.Fatalf("first Start: %+v %v, want running, with no place", first, err)
	}
	<-b.started

	ana, err := l.Start(t.Context(), api.RunSpec{Seat: "ana", Student: " Ana "}, target, "")
	if err != nil || ana.Status != api.RunQueued || ana.Place != 1 || ana.Spec.Student != "Ana" {
		t.Fatalf("Ana's Start while run %s goes: %+v %v, want queued at place 1", first.ID, ana, err)
	}
	if first.Started == nil || ana.Started != nil || ana.Queued.IsZero() || ana.Queued.Before(first.Queued) {
		t.Errorf("the running run started at %v, the queued one at %v, queued at %v after %v: want only the running one started",
			first.Started, ana.Started, ana.Queued, first.Queued)
	}
	bo, err := l.Start(t.Context(), api.RunSpec{Seat: "bo", Lock: "none"}, target, "")
	if err != nil || bo.Status != api.RunQueued || bo.Place != 2 {
		t.Fatalf("Bo's Start: %+v %v, want queued at place 2", bo, err)
	}
	if r, err := l.Get(bo.ID); err != nil || r.Place != 2 {
		t.Errorf("Get Bo's run: %+v %v, want place 2", r, err)
	}
	ids := func(runs []api.Run) (out []string) {
		for _, r := range runs {
			out = append(out, r.ID+":"+r.Status)
		}
		return out
	}
	// A page reloaded mid-run finds its seat's runs; the teacher, everyone's.
	if diff := cmp.Diff([]string{ana.ID + ":queued"}, ids(l.List("ana"))); diff != "" {
		t.Errorf("Ana's list (-want +got):\n%s", diff)
	}
	// A run without a seat (a script's) is nobody's: every seat lists it.
	script, err := l.Start(t.Context(), api.RunSpec{}, target, "")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{ana.ID + ":queued", script.ID + ":queued"}, ids(l.List("ana"))); diff != "" {
		t.Errorf("Ana's list with a script's run queued (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{first.ID + ":running", ana.ID + ":queued", bo.ID + ":queued", script.ID + ":queued"}, ids(l.List(""))); diff != "" {
		t.Errorf("the teacher's list (-want +got):\n%s", diff)
	}
	if _, err := l.Timeline(ana.ID); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "queued") {
		t.Errorf("the timeline of a queued run: %v, want ErrNotFound saying it is queued", err)
	}
	for range MaxQueued - 3 {
		if _, err := l.Start(t.Context(), api.RunSpec{}, target, ""); err != nil {
			t.Fatalf("filling the queue: %v", err)
		}
	}
	if _, err := l.Start(t.Context(), api.RunSpec{}, target, ""); !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "run "+first.ID) {
		t.Errorf("Start on a full queue: %v, want ErrBusy naming run %s", err, first.ID)
	}

	// Released, the runs go one at a time in the order they came.
	close(b.release)
	waitFinished(t, l, first.ID)
	if s := <-b.started; s.UserBase != userBase+2*userSpan {
		t.Errorf("the run after %s has user base %d, want Ana's (run 2)", first.ID, s.UserBase)
	}
	if r, err := l.Get(bo.ID); err != nil || r.Status != api.RunQueued && r.Status != api.RunRunning {
		t.Errorf("Bo's run after the first: %+v %v", r, err)
	}
	if s := <-b.started; s.Lock != "none" {
		t.Errorf("the third run to start is %q, want Bo's (none)", s.Lock)
	}
	if r := waitFinished(t, l, bo.ID); r.Status != api.RunDone || r.Place != 0 || r.Started == nil || !r.Started.After(r.Queued) || !r.Queued.Equal(bo.Queued) {
		t.Errorf("Bo's run: %+v, want done, with no place, started after it was queued, its queued_at kept", r)
	}
	for range MaxQueued - 2 {
		<-b.started
	}
}

// TestASeatWaitsForAtMostThreeRuns: one seat cannot fill the class's
// queue; the other seats, and runs without a seat, still queue.
func TestASeatWaitsForAtMostThreeRuns(t *testing.T) {
	b := newBlocking()
	l := open(t, Options{Run: b.run})
	if _, err := l.Start(t.Context(), api.RunSpec{Seat: "ana"}, target, ""); err != nil {
		t.Fatal(err)
	}
	<-b.started
	for i := range MaxQueuedPerSeat {
		if _, err := l.Start(t.Context(), api.RunSpec{Seat: "ana"}, target, ""); err != nil {
			t.Fatalf("Ana's waiting run %d: %v", i+1, err)
		}
	}
	_, err := l.Start(t.Context(), api.RunSpec{Seat: "ana"}, target, "")
	if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "seat ana has 3 runs waiting") {
		t.Errorf("Ana's run past her %d waiting: %v, want ErrBusy saying why", MaxQueuedPerSeat, err)
	}
	for _, seat := range []string{"bo", "", ""} {
		if r, err := l.Start(t.Context(), api.RunSpec{Seat: seat}, target, ""); err != nil || r.Status != api.RunQueued {
			t.Errorf("a run of seat %q behind Ana's: %+v %v, want queued", seat, r, err)
		}
	}
	close(b.release)
	for range MaxQueuedPerSeat + 3 { // the first run started above
		<-b.started
	}
}

// TestCloseFailsTheQueuedRuns: a shutdown runs nothing more, and says so
// to those waiting.
func TestCloseFailsTheQueuedRuns(t *testing.T) {
	b := newBlocking()
	l := open(t, Options{Run: b.run})
	if _, err := l.Start(t.Context(), api.RunSpec{}, target, ""); err != nil {
		t.Fatal(err)
	}
	<-b.started
	queued, err := l.Start(t.Context(), api.RunSpec{}, target, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if r, err := l.Get(queued.ID); err != nil || r.Status != api.RunFailed || !strings.Contains(r.Error, "shutting down") || r.Place != 0 {
		t.Errorf("a queued run after Close: %+v %v, want failed by the shutdown", r, err)
	}
	select {
	case s := <-b.started:
		t.Errorf("a queued run started after Close: %+v", s)
	default:
	}
}

func TestTimeLimitCancelsTheRun(t *testing.T) {
	b := newBlocking()
	l := open(t, Options{Run: b.run, Timeout: time.Millisecond})
	l.grace = 0
	r, err := l.Start(t.Context(), api.RunSpec{}, target, "")
	if err != nil {
		t.Fatal(err)
	}
	r = waitFinished(t, l, r.ID)
	if r.Status != api.RunFailed || !strings.Contains(r.Error, "time limit") {
		t.Errorf("run past its limit: %+v, want failed on the time limit", r)
	}
}

func TestHarnessTimeoutIsAFailure(t *testing.T) {
	l := open(t, Options{Run: func(ctx context.Context, s harness.Spec, p func(harness.Progress)) (harness.Row, error) {
		row, _ := instant(ctx, s, p)
		row.TimedOut, row.Note = true, "timed out after 60s: 10 of 300 requests completed"
		return row, nil
	}})
	r, err := l.Start(t.Context(), api.RunSpec{}, target, "")
	if err != nil {
		t.Fatal(err)
	}
	r = waitFinished(t, l, r.ID)
	if r.Status != api.RunFailed || !strings.Contains(r.Error, "10 of 300") || r.Result == nil {
		t.Errorf("timed-out run: %+v, want failed with its partial row", r)
	}
}

func TestCloseCancelsAndWaits(t *testing.T) {
	b := newBlocking()
	l := open(t, Options{Run: b.run})
	r, err := l.Start(t.Context(), api.RunSpec{}, target, "")
	if err != nil {
		t.Fatal(err)
	}
	<-b.started
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Close returned, so the run has been filed: no polling needed.
	if r, err = l.Get(r.ID); err != nil || r.Status != api.RunFailed || !strings.Contains(r.Error, "shutting down") {
		t.Errorf("run after Close: %+v %v", r, err)
	}
	if _, err := l.Start(t.Context(), api.RunSpec{}, target, ""); !errors.Is(err, ErrClosed) {
		t.Errorf("Start after Close: %v, want ErrClosed", err)
	}
}

func TestOnlyTheLastRunsAreKept(t *testing.T) {
	l := open(t, Options{Run: instant, Keep: 2})
	var ids []string
	for range 3 {
		r, err := l.Start(t.Context(), api.RunSpec{}, target, "")
		if err != nil {
			t.Fatal(err)
		}
		waitFinished(t, l, r.ID)
		ids = append(ids, r.ID)
	}
	var got []string
	for _, r := range l.List("") {
		got = append(got, r.ID)
	}
	if diff := cmp.Diff(ids[1:], got); diff != "" {
		t.Errorf("kept runs (-want +got):\n%s", diff)
	}
	if _, err := l.Get(ids[0]); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get the dropped run: %v, want ErrNotFound", err)
	}
}
