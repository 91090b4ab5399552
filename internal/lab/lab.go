// Package lab runs the web page's load runs inside the service: Start
// begins one, Get reports its progress and result, List the finished ones
// and the one going, Timeline a finished one's race;
// internal/server serves them as /api/runs. A run is the load harness
// pointed at the service itself, on a product of its own, so the demo
// product is never touched. One run goes at a time and every run is
// bounded, because the service and its load share one machine: an unbounded
// run from a browser tab would be a denial of service with extra steps.
//
// A class shares one lab: a run started while another goes waits in a
// queue, first come first run, and says its place in it; each run names
// the seat (a browser) that started it, so that List can give a student
// their own runs and the teacher everyone's (issue 41, finding 7).
package lab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"seckill/internal/api"
	"seckill/internal/lab/harness"
)

// Outcomes of Start and Get a caller branches on; internal/server maps each
// to its status.
var (
	// ErrInvalid wraps every error caused by the run's settings.
	ErrInvalid = errors.New("lab: invalid run")
	// ErrBusy: the queue of runs waiting behind the one going is full, or
	// holds the seat's MaxQueuedPerSeat already.
	ErrBusy = errors.New("lab: run in progress")
	// ErrClassFull: the class keeps MaxClassAnswers answers already.
	ErrClassFull = errors.New("lab: the class is full")
	// ErrClosed: the lab is closed, the service is shutting down.
	ErrClosed = errors.New("lab: closed")
	// ErrNotFound: no such run among the going and the kept ones.
	ErrNotFound = errors.New("lab: no such run")
	// ErrNoTarget: neither Options.Target nor Start named where to send the
	// run's orders.
	ErrNoTarget = errors.New("lab: no target")
)

// Runner runs one load run; harness.Run is the real one. Tests pass a fake.
type Runner func(ctx context.Context, spec harness.Spec, progress func(harness.Progress)) (harness.Row, error)

// Options configure a Lab.
type Options struct {
	// Run runs one load run. Default: harness.Run.
	Run Runner
	// Target is the base URL runs send their requests to. Default: the
	// target Start is given, the address the request to start the run
	// arrived at, which is this very process whatever interface or port it
	// listens on.
	Target string
	// ProductID is the product every run resets and buys. Default: 9001.
	ProductID int64
	// Timeout bounds a run's load; the run is then cut short, judged on what
	// it sold and reported as failed. Default: 60s.
	Timeout time.Duration
	// Keep is the number of finished runs List returns. Default: 50.
	Keep int
	// Log receives runs that fail. Default: slog.Default().
	Log *slog.Logger
}

// Defaults of Options.
const (
	DefaultProductID = 9001
	DefaultTimeout   = 60 * time.Second
	DefaultKeep      = 50
	// MaxQueued is how many runs may wait behind the one going: a class of
	// thirty, each with a run in line.
	MaxQueued = 30
	// MaxQueuedPerSeat is how many of them may be one seat's: one student
	// cannot fill the class's queue. Runs without a seat (a script's, the
	// operator's) are not counted.
	MaxQueuedPerSeat = 3
)

// auditGrace is how long past Options.Timeout a run may take before its
// context is cancelled: the harness audits a timed-out run on a budget of
// its own (10s), and the verdict of a cut-short run is the point of it.
const auditGrace = 15 * time.Second

// userSpan separates the user ids of consecutive runs, so that a run never
// meets the previous run's users in the per-user rate limit.
const (
	userBase = 1_000_000_000
	userSpan = api.MaxRunBuyers
)

// Lab holds the run going and the last finished ones. Its methods are safe
// for concurrent use.
type Lab struct {
	opt   Options
	grace time.Duration // auditGrace; shorter in tests

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	seq      int
	closed   bool
	current  *api.Run  // the run going, nil when idle
	queue    []waiting // the runs waiting behind current, first to run first
	finished []api.Run // newest last, at most opt.Keep
	// class is what the class's seats predicted, lesson by lesson.
	class *Class
	// timelines are the last KeepTimelines finished runs' timelines, by id:
	// a big run's is megabytes.
	timelines map[string]*api.Timeline
}

// waiting is a queued run and the harness's spec it will run with.
type waiting struct {
	run *api.Run
	hs  harness.Spec
}

// KeepTimelines is how many finished runs' timelines a Lab keeps.
const KeepTimelines = 20

// New returns a Lab with nothing running. Close it when the service stops.
func New(opt Options) *Lab {
	if opt.Run == nil {
		opt.Run = harness.Run
	}
	if opt.ProductID == 0 {
		opt.ProductID = DefaultProductID
	}
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultTimeout
	}
	if opt.Keep <= 0 {
		opt.Keep = DefaultKeep
	}
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Lab{opt: opt, grace: auditGrace, ctx: ctx, cancel: cancel, class: NewClass(), timelines: make(map[string]*api.Timeline)}
}

// Close cancels the run going, if any, fails the queued ones, waits for the
// run going to end, and refuses runs from then on.
func (l *Lab) Close() error {
	l.mu.Lock()
	l.closed = true
	now := time.Now().UTC()
	for _, w := range l.queue {
		w.run.Status, w.run.Error, w.run.Finished = api.RunFailed, "cancelled: the service is shutting down", &now
		l.finish(*w.run)
	}
	l.queue = nil
	l.mu.Unlock()
	l.cancel()
	l.wg.Wait()
	return nil
}

// Start checks spec, applying its defaults, and starts the run in the
// background, or queues it behind the run going (status queued, with its
// place); the run outlives ctx. It sends its orders to Options.Target,
// or to target when that is empty, and resets its product with token (the
// one that let the request through). It fails with ErrInvalid, ErrBusy
// (the queue is full, or holds the seat's MaxQueuedPerSeat), ErrClosed or
// ErrNoTarget.
func (l *Lab) Start(ctx context.Context, spec api.RunSpec, target, token string) (api.Run, error) {
	if err := ctx.Err(); err != nil {
		return api.Run{}, err
	}
	spec, err := check(spec)
	if err != nil {
		return api.Run{}, err
	}
	if l.opt.Target != "" {
		target = l.opt.Target
	}
	if target == "" {
		return api.Run{}, fmt.Errorf("%w: set Options.Target", ErrNoTarget)
	}

	l.mu.Lock()
	switch {
	case l.closed:
		l.mu.Unlock()
		return api.Run{}, fmt.Errorf("%w: the service is shutting down", ErrClosed)
	case len(l.queue) >= MaxQueued:
		l.mu.Unlock()
		return api.Run{}, fmt.Errorf("%w: %d runs wait behind run %s, as many as the queue holds; try again when one has run", ErrBusy, len(l.queue), l.current.ID)
	case spec.Seat != "" && l.waiting(spec.Seat) >= MaxQueuedPerSeat:
		l.mu.Unlock()
		return api.Run{}, fmt.Errorf("%w: seat %s has %d runs waiting, as many as a seat may: the class's turn comes first; try again when one has run",
			ErrBusy, spec.Seat, MaxQueuedPerSeat)
	}
	l.seq++
	run := &api.Run{
		ID: strconv.Itoa(l.seq), Status: api.RunQueued, Spec: spec, Product: l.opt.ProductID,
		Progress: api.RunProgress{Total: spec.Requests}, Queued: time.Now().UTC(),
	}
	hs := toHarness(spec, target, l.opt.ProductID, userBase+int64(l.seq)*userSpan, l.opt.Timeout)
	hs.AdminToken = token
	l.queue = append(l.queue, waiting{run, hs})
	if l.current == nil {
		l.next()
	}
	view := l.view(run)
	l.mu.Unlock()
	return view, nil
}

// waiting counts the seat's runs in the queue; l.mu is held.
func (l *Lab) waiting(seat string) (n int) {
	for _, w := range l.queue {
		if w.run.Spec.Seat == seat {
			n++
		}
	}
	return n
}

// next starts the first queued run, if any; l.mu is held. The WaitGroup is
// added to under the lock: Close sets closed under it too, so it either
// emptied the queue first or waits for this run.
func (l *Lab) next() {
	if len(l.queue) == 0 || l.closed {
		return
	}
	w := l.queue[0]
	l.queue = l.queue[1:]
	now := time.Now().UTC()
	w.run.Status, w.run.Started = api.RunRunning, &now
	l.current = w.run
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		l.execute(w.run, w.hs)
	}()
}

// view is what a caller is shown of run: a copy, with a queued run's place
// in the queue (1: it runs next); l.mu is held.
func (l *Lab) view(run *api.Run) api.Run {
	v := *run
	for i, w := range l.queue {
		if w.run == run {
			v.Place = i + 1
		}
	}
	return v
}

// execute runs one run to its end and files it among the finished.
func (l *Lab) execute(run *api.Run, hs harness.Spec) {
	ctx, cancel := context.WithTimeout(l.ctx, l.opt.Timeout+l.grace)
	defer cancel()
	row, err := l.opt.Run(ctx, hs, func(p harness.Progress) {
		l.mu.Lock()
		run.Progress = p.RunProgress
		l.mu.Unlock()
	})

	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now().UTC()
	run.Finished = &now
	run.Status = api.RunDone
	if row.Strategy != "" || row.Requests > 0 {
		run.Result = &row.RunResult
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded) && errors.Is(ctx.Err(), context.DeadlineExceeded):
		run.Status, run.Error = api.RunFailed, fmt.Sprintf("cancelled: the run passed its time limit of %s", l.opt.Timeout)
	case err != nil && l.ctx.Err() != nil:
		run.Status, run.Error = api.RunFailed, "cancelled: the service is shutting down"
	case errors.Is(err, harness.ErrRejected):
		run.Status, run.Error = api.RunFailed, "the service refused the run's settings: "+err.Error()
	case err != nil:
		run.Status, run.Error = api.RunFailed, err.Error()
	case row.TimedOut:
		run.Status, run.Error = api.RunFailed, "time limit reached: "+row.Note
	}
	if run.Status == api.RunFailed {
		l.opt.Log.Warn("lab run failed", "run", run.ID, "error", run.Error)
	}
	if row.Timeline != nil {
		l.timelines[run.ID] = row.Timeline
	}
	l.finish(*run)
	l.current = nil
	l.next()
}

// finish files a run among the finished, keeping the last opt.Keep and
// the timelines of the last KeepTimelines; l.mu is held.
func (l *Lab) finish(run api.Run) {
	l.finished = append(l.finished, run)
	if n := len(l.finished) - l.opt.Keep; n > 0 {
		l.finished = append([]api.Run(nil), l.finished[n:]...)
	}
	for i := range max(0, len(l.finished)-KeepTimelines) {
		delete(l.timelines, l.finished[i].ID)
	}
}

// List returns the finished runs, newest last, then the run going if any,
// with its progress, then the queued ones in their order, with their
// places: a page reloaded mid-run finds them there. A seat other than ""
// keeps the runs that seat started and those started without a seat (a
// script's, curl's: nobody's, so everyone's), where the class asks for
// everyone's with "". Never nil.
func (l *Lab) List(seat string) []api.Run {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]api.Run, 0, len(l.finished)+1+len(l.queue))
	add := func(r api.Run) {
		if seat == "" || r.Spec.Seat == seat || r.Spec.Seat == "" {
			out = append(out, r)
		}
	}
	for _, r := range l.finished {
		add(r)
	}
	if l.current != nil {
		add(*l.current)
	}
	for _, w := range l.queue {
		add(l.view(w.run))
	}
	return out
}

// Timeline returns a finished run's timeline, or ErrNotFound: for a run
// going, a run not kept, or one that sent nothing.
func (l *Lab) Timeline(id string) (*api.Timeline, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if tl, ok := l.timelines[id]; ok {
		return tl, nil
	}
	if l.current != nil && l.current.ID == id {
		return nil, fmt.Errorf("%w: run %s is still going; its timeline comes when it ends", ErrNotFound, id)
	}
	for _, w := range l.queue {
		if w.run.ID == id {
			return nil, fmt.Errorf("%w: run %s is queued (place %d); its timeline comes when it has run", ErrNotFound, id, l.view(w.run).Place)
		}
	}
	return nil, fmt.Errorf("%w: no timeline for run %q (timelines are kept for the last %d runs)", ErrNotFound, id, KeepTimelines)
}

// Get returns the run named id, going or finished, or ErrNotFound.
func (l *Lab) Get(id string) (api.Run, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.current != nil && l.current.ID == id {
		return *l.current, nil
	}
	for _, w := range l.queue {
		if w.run.ID == id {
			return l.view(w.run), nil
		}
	}
	for _, r := range l.finished {
		if r.ID == id {
			return r, nil
		}
	}
	return api.Run{}, fmt.Errorf("%w: %q (finished runs are kept only while they are among the last %d)", ErrNotFound, id, l.opt.Keep)
}

// Answer keeps a seat's answer to a course lesson (Class.Answer).
func (l *Lab) Answer(a api.ClassAnswer) (api.ClassAnswer, error) { return l.class.Answer(a) }

// Lessons is the class's answers by lesson, the teacher's view (Class.Lessons).
func (l *Lab) Lessons() []api.ClassLesson { return l.class.Lessons() }
