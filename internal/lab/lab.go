// Package lab runs the web page's load runs inside the service: POST
// /api/runs starts one, GET /api/runs/:id reports its progress and result,
// GET /api/runs lists the finished ones. A run is the load harness pointed at
// the service itself, on a product of its own, so the demo product is never
// touched. One run goes at a time and every run is bounded, because the
// service and its load share one machine: an unbounded run from a browser
// tab would be a denial of service with extra steps.
package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"seckill/internal/harness"
)

// Runner runs one load run; harness.Run is the real one. Tests pass a fake.
type Runner func(ctx context.Context, spec harness.Spec, progress func(harness.Progress)) (harness.Row, error)

// Options configure a Lab.
type Options struct {
	// Run runs one load run. Default: harness.Run.
	Run Runner
	// Target is the base URL runs send their requests to. Default: the
	// address the POST /api/runs arrived at, which is this very process
	// whatever interface or port it listens on.
	Target string
	// ProductID is the product every run resets and buys. Default: 9001.
	ProductID int64
	// Timeout bounds a run's load; the run is then cut short, judged on what
	// it sold and reported as failed. Default: 60s.
	Timeout time.Duration
	// Keep is the number of finished runs GET /api/runs returns. Default: 50.
	Keep int
	// Log receives runs that fail. Default: slog.Default().
	Log *slog.Logger
}

// Defaults of Options.
const (
	DefaultProductID = 9001
	DefaultTimeout   = 60 * time.Second
	DefaultKeep      = 50
)

// auditGrace is how long past Options.Timeout a run may take before its
// context is cancelled: the harness audits a timed-out run on a budget of
// its own (10s), and the verdict of a cut-short run is the point of it.
const auditGrace = 15 * time.Second

// userSpan separates the user ids of consecutive runs, so that a run never
// meets the previous run's users in the per-user rate limit.
const (
	userBase = 1_000_000_000
	userSpan = MaxBuyers
)

// Statuses of a run.
const (
	Running = "running"
	Done    = "done"
	Failed  = "failed"
)

// Run is a run as the API shows it.
type Run struct {
	ID       string       `json:"id"`
	Status   string       `json:"status"`
	Progress Progress     `json:"progress"`
	Spec     Spec         `json:"spec"`
	Product  int64        `json:"product_id"`
	Result   *harness.Row `json:"result,omitempty"`
	Error    string       `json:"error,omitempty"`
	Started  time.Time    `json:"started_at"`
	Finished *time.Time   `json:"finished_at,omitempty"`
}

// Progress counts the requests of a run.
type Progress struct {
	Done    int `json:"done"`
	Total   int `json:"total"`
	OK      int `json:"ok"`
	SoldOut int `json:"sold_out"`
	Errors  int `json:"errors"`
}

// Lab serves /api/runs. Its methods are safe for concurrent use.
type Lab struct {
	opt   Options
	grace time.Duration // auditGrace; shorter in tests

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	seq      int
	closed   bool
	current  *Run  // the run going, nil when idle
	finished []Run // newest last, at most opt.Keep
}

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
	return &Lab{opt: opt, grace: auditGrace, ctx: ctx, cancel: cancel}
}

// Close cancels the run going, if any, waits for it to end, and refuses
// runs from then on.
func (l *Lab) Close() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.cancel()
	l.wg.Wait()
	return nil
}

// Error codes of the API (docs/API.md).
const (
	codeBadRequest = "bad_request"
	codeNotFound   = "not_found"
	codeInProgress = "run_in_progress"
	codeClosed     = "unavailable"
)

// Start is POST /api/runs: it checks the spec and starts the run, 202.
func (l *Lab) Start(w http.ResponseWriter, r *http.Request) {
	spec, err := decodeSpec(r)
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		fail(w, http.StatusRequestEntityTooLarge, "too_large", err.Error())
		return
	}
	if err != nil {
		fail(w, http.StatusBadRequest, codeBadRequest, err.Error())
		return
	}
	target := l.opt.Target
	if target == "" {
		if target, err = selfURL(r); err != nil {
			fail(w, http.StatusInternalServerError, "internal", err.Error())
			return
		}
	}
	// The token that let this request through also lets the run reset its product.
	token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")

	l.mu.Lock()
	switch {
	case l.closed:
		l.mu.Unlock()
		fail(w, http.StatusServiceUnavailable, codeClosed, "the service is shutting down")
		return
	case l.current != nil:
		id := l.current.ID
		l.mu.Unlock()
		fail(w, http.StatusConflict, codeInProgress, "run "+id+" is still going; one run at a time")
		return
	}
	l.seq++
	run := &Run{
		ID: strconv.Itoa(l.seq), Status: Running, Spec: spec, Product: l.opt.ProductID,
		Progress: Progress{Total: spec.Requests}, Started: time.Now().UTC(),
	}
	l.current = run
	view := *run
	hs := spec.harness(target, l.opt.ProductID, userBase+int64(l.seq)*userSpan, l.opt.Timeout)
	hs.AdminToken = token
	// Add under the lock: Close sets closed under it too, so it either
	// refused this run above or waits for it here.
	l.wg.Add(1)
	l.mu.Unlock()

	go func() {
		defer l.wg.Done()
		l.execute(run, hs)
	}()
	w.Header().Set("Location", "/api/runs/"+view.ID)
	writeJSON(w, http.StatusAccepted, view)
}

// execute runs one run to its end and files it among the finished.
func (l *Lab) execute(run *Run, hs harness.Spec) {
	ctx, cancel := context.WithTimeout(l.ctx, l.opt.Timeout+l.grace)
	defer cancel()
	row, err := l.opt.Run(ctx, hs, func(p harness.Progress) {
		l.mu.Lock()
		run.Progress = Progress{Done: p.Done, Total: p.Total, OK: p.OK, SoldOut: p.SoldOut, Errors: p.Errors}
		l.mu.Unlock()
	})

	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now().UTC()
	run.Finished = &now
	run.Status = Done
	if row.Strategy != "" || row.Requests > 0 {
		run.Result = &row
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded) && errors.Is(ctx.Err(), context.DeadlineExceeded):
		run.Status, run.Error = Failed, fmt.Sprintf("cancelled: the run passed its time limit of %s", l.opt.Timeout)
	case err != nil && l.ctx.Err() != nil:
		run.Status, run.Error = Failed, "cancelled: the service is shutting down"
	case errors.Is(err, harness.ErrRejected):
		run.Status, run.Error = Failed, "the service refused the run's settings: "+err.Error()
	case err != nil:
		run.Status, run.Error = Failed, err.Error()
	case row.TimedOut:
		run.Status, run.Error = Failed, "time limit reached: "+row.Note
	}
	if run.Status == Failed {
		l.opt.Log.Warn("lab run failed", "run", run.ID, "error", run.Error)
	}
	l.finished = append(l.finished, *run)
	if n := len(l.finished) - l.opt.Keep; n > 0 {
		l.finished = append([]Run(nil), l.finished[n:]...)
	}
	l.current = nil
}

// List is GET /api/runs: the finished runs, newest last.
func (l *Lab) List(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	out := append(make([]Run, 0, len(l.finished)), l.finished...)
	l.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

// Get is GET /api/runs/:id.
func (l *Lab) Get(w http.ResponseWriter, r *http.Request, id string) {
	l.mu.Lock()
	run, ok := l.lookup(id)
	l.mu.Unlock()
	if !ok {
		fail(w, http.StatusNotFound, codeNotFound, "no run "+strconv.Quote(id)+" (finished runs are kept only while they are among the last "+strconv.Itoa(l.opt.Keep)+")")
		return
	}
	writeJSON(w, http.StatusOK, run)
}

// lookup returns a copy of the run named id; l.mu is held.
func (l *Lab) lookup(id string) (Run, bool) {
	if l.current != nil && l.current.ID == id {
		return *l.current, true
	}
	for _, r := range l.finished {
		if r.ID == id {
			return r, true
		}
	}
	return Run{}, false
}

// selfURL is the base URL of the listener r arrived on: the lab's runs go
// back through the service's full HTTP stack, as a client's would.
func selfURL(r *http.Request) (string, error) {
	addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return "", errors.New("lab: no local address on the request; set Options.Target")
	}
	return "http://" + addr.String(), nil
}

func decodeSpec(r *http.Request) (Spec, error) {
	var s Spec
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(&s)
	if err == nil && dec.More() {
		err = errors.New("unexpected data after the JSON object")
	}
	var typ *json.UnmarshalTypeError
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return s, fmt.Errorf("body larger than %d bytes: %w", tooLarge.Limit, err)
	case errors.As(err, &typ):
		return s, fmt.Errorf("field %q must be a %s, not %s", typ.Field, typ.Type, typ.Value)
	case err != nil:
		return s, fmt.Errorf("reading the run's JSON: %w", err)
	}
	return s.check()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client went away: nobody to tell
}

func fail(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, struct {
		Code  string `json:"code"`
		Error string `json:"error"`
	}{code, msg})
}
