package harness

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"seckill/internal/api"
)

// Row is the outcome of one run: the result the lab's runs carry over the
// API, and what a scenario expected of it.
type Row struct {
	api.RunResult
	// Expect is what a scenario expected of this row (see Check).
	Expect *Expectation `json:"expect,omitempty"`
	// Timeline is the run's race, drawn from its purchases' traces.
	Timeline *api.Timeline `json:"timeline,omitempty"`
	// AcceptedIDs are the ids answered 202, when the spec asked to check
	// them (Spec.CheckAccepted); not in the report.
	AcceptedIDs []string `json:"-"`
}

// Progress is a snapshot of a run, passed to the progress callback.
type Progress struct {
	api.RunProgress
	Elapsed time.Duration
}

// progressEvery is how often the progress callback is called.
const progressEvery = 200 * time.Millisecond

// auditTimeout bounds the audit after the load, which gets its own time so
// that a run cut short by its timeout is still judged.
const auditTimeout = 10 * time.Second

// Run resets the product, sends the workload and judges the outcome. The
// progress callback, when not nil, is called from one goroutine at the
// start, every 200ms and once at the end. A run the service rejects (400,
// e.g. an unknown lock) returns a SKIPPED row and an error matching
// ErrRejected; a run cut short by ctx returns the row so far and ctx's error.
func Run(ctx context.Context, spec Spec, progress func(Progress)) (Row, error) {
	spec, err := spec.withDefaults()
	if err != nil {
		return Row{}, err
	}
	c := NewClient(spec.Concurrency)
	defer c.CloseIdleConnections()

	runCtx, cancel := context.WithTimeout(ctx, time.Duration(spec.Timeout))
	defer cancel()
	if err := reset(runCtx, c, spec); err != nil {
		row := newRow(spec)
		row.Verdict, row.AuditVerdict, row.Note = Skipped, Skipped, resetNote(err)
		return row, err
	}
	if spec.PayTimeout > 0 {
		return payRace(ctx, runCtx, c, spec)
	}
	row, err := drive(runCtx, c, spec, progress)
	if err != nil {
		return row, err
	}
	if ctx.Err() != nil { // cancelled by the caller, not timed out: no verdict
		row.Note = "cancelled"
		return row, ctx.Err()
	}

	if row.Accepted > 0 {
		// Queued orders are judged once written: wait for the queue to drain.
		if err := drain(context.WithoutCancel(ctx), c, spec, &row); err != nil {
			row.Note = err.Error()
		}
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditTimeout)
	defer cancel()
	if spec.Reconcile {
		if err := reconcile(actx, c, spec); err != nil {
			row.Verdict, row.Note = Errors, err.Error()
			return row, err
		}
	}
	// The 202s are looked up before the audit, so that a row written in
	// between counts in the audit, not as missing.
	checked := 0
	if spec.CheckAccepted {
		if checked, row.Twice202, err = lookup(actx, c, spec.Targets[0], spec.ProductID, row.AcceptedIDs); err != nil {
			row.Verdict, row.Note = Errors, err.Error()
			return row, err
		}
		row.Missing202 = checked
	}
	audit, err := fetchAudit(actx, c, spec.Targets[0], spec.ProductID)
	if err != nil {
		row.Verdict = worst(Errors, classify(max(0, row.OK-spec.Stock), 0, 0, row.Errors))
		row.Note = err.Error()
		return row, err
	}
	t := Tally{Stock: spec.Stock, OK: row.OK, SoldOut: row.SoldOut, Errors: row.Errors}
	t.Checked, t.Missing = spec.CheckAccepted, checked
	for _, code := range unknownCodes {
		t.Unknown += row.ErrorCodes[code]
	}
	j := Judge(t, audit)
	row.Sold = audit.Orders
	row.DeadLettered = audit.DeadLettered
	row.Oversold, row.LostUpdates, row.Undersold = j.Oversold, j.LostUpdates, j.Undersold
	row.Verdict, row.HarnessVerdict, row.AuditVerdict = j.Verdict, j.Harness, j.Audit
	row.ServiceVerdict, row.Agree, row.Disagreements = audit.Verdict, j.Agree, j.Disagreements
	return row, nil
}

// resetNote says why a reset failed without the product id, which the row
// carries: runs the service refuses alike then read alike.
func resetNote(err error) string {
	if cause := errors.Unwrap(err); cause != nil {
		err = cause
	}
	return "resetting the product: " + err.Error()
}

// Drive sends the workload only: no reset, no audit, no verdict. It is the
// load generator alone, measured by the self-test against a bare handler.
func Drive(ctx context.Context, spec Spec, progress func(Progress)) (Row, error) {
	spec, err := spec.withDefaults()
	if err != nil {
		return Row{}, err
	}
	c := NewClient(spec.Concurrency)
	defer c.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, time.Duration(spec.Timeout))
	defer cancel()
	row, err := drive(ctx, c, spec, progress)
	if err == nil && !row.TimedOut {
		err = ctx.Err() // cancelled by the caller
	}
	return row, err
}

// NewClient returns a client whose pool keeps a connection per worker, so
// that a run reuses its connections instead of opening one per request.
func NewClient(concurrency int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 0 // no global cap: the per-host one below governs
	t.MaxIdleConnsPerHost = max(concurrency, 2)
	t.DisableCompression = true
	return &http.Client{Transport: t}
}

func newRow(s Spec) Row {
	return Row{RunResult: api.RunResult{
		ProductID: s.ProductID, Strategy: s.Lock, Mode: s.Mode, Instances: len(s.Targets), Stock: s.Stock,
		Shards: s.Shards, Fallback: s.Fallback, Concurrency: s.Concurrency, HoldMS: time.Duration(s.Hold).Milliseconds(),
		Buyers: s.Buyers, UserBase: s.UserBase, Fault: s.fault(), Lifecycle: s.Lifecycle,
	}}
}

// Histogram bounds, in microseconds: 1µs to 5 minutes at 3 significant
// digits (0.1% resolution).
const (
	histMin  = 1
	histMax  = int64(5 * time.Minute / time.Microsecond)
	histSigs = 3
)

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(histMin, histMax, histSigs) }

// maxSamples bounds the distinct error messages a row keeps.
const maxSamples = 5

// worker owns its counters and histograms, so the hot path shares nothing
// but the request index and the progress counters; they are merged after.
type worker struct {
	// conns are the worker's connections, one per target, when every
	// target is plain http; otherwise requests go through client.
	conns     []*conn
	client    *http.Client
	urls      []string
	buf, body []byte // reused request buffers of the conns path
	lat, wait *hdrhistogram.Histogram
	ok        int
	accepted  int
	soldOut   int
	already   int
	errs      int
	// lastSale is when the request of the worker's latest 201 was sent;
	// soldOutAt when each "sold out" answer arrived.
	lastSale  time.Time
	soldOutAt []time.Time
	codes     map[string]int
	samples   []string
	// start is the run's; traces are the answers' traces, stamped with it.
	start  time.Time
	traces []Traced
	// accepted are the ids answered 202, kept when Spec.CheckAccepted.
	keepIDs     bool
	acceptedIDs []string
}

func (w *worker) fail(code, msg string) {
	w.errs++
	w.codes[code]++
	if len(w.samples) < maxSamples && !slices.Contains(w.samples, msg) {
		w.samples = append(w.samples, msg)
	}
}

// shared are the counters the progress callback reads while workers run.
type shared struct {
	next                      atomic.Int64
	done, ok, soldOut, errors atomic.Int64
	// doneBy counts the answers by target, for Spec.MidwayTarget.
	doneBy []atomic.Int64
}

// answered counts an answer of target.
func (sh *shared) answered(target int) {
	sh.doneBy[target].Add(1)
	sh.done.Add(1)
}

// midwayCount is the count of answers Spec.MidwayAfter is compared with.
func (l *load) midwayCount() int64 {
	if t := l.spec.MidwayTarget; t != nil {
		return l.sh.doneBy[*t].Load()
	}
	return l.sh.done.Load()
}

// drive sends spec's workload through c and counts the answers: workers,
// then their request loops with the progress calls beside, then the tally.
func drive(ctx context.Context, c *http.Client, spec Spec, progress func(Progress)) (Row, error) {
	row := newRow(spec)
	plain, faulty, err := bodyTails(spec)
	if err != nil {
		return row, err
	}
	l := &load{spec: spec, plain: plain, faulty: faulty, start: time.Now()}
	l.sh.doneBy = make([]atomic.Int64, len(spec.Targets))
	workers := newWorkers(c, spec, l.start)
	defer func() {
		for _, w := range workers {
			w.close()
		}
	}()

	stopProgress := l.report(progress)
	l.send(ctx, workers)
	elapsed := time.Since(l.start)
	stopProgress()
	if err := l.midwayDone(); err != nil {
		return row, err
	}

	tally(&row, workers, elapsed)
	var traces []Traced
	for _, w := range workers {
		traces = append(traces, w.traces...)
		row.AcceptedIDs = append(row.AcceptedIDs, w.acceptedIDs...)
	}
	row.Timeline = BuildTimeline(traces, cmp.Or(spec.Shards, api.DefaultShards), l.start.UnixMicro(), spec.UserBase)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && row.Requests < spec.Requests {
		row.TimedOut = true
		row.Note = fmt.Sprintf("timed out after %s: %d of %d requests completed",
			time.Duration(spec.Timeout), row.Requests, spec.Requests)
	}
	return row, nil
}

// newWorkers returns the run's workers, each with a connection of its own
// to every target when all are plain http.
func newWorkers(c *http.Client, spec Spec, start time.Time) []*worker {
	urls := make([]string, len(spec.Targets))
	for i, t := range spec.Targets {
		urls[i] = t + "/api/orders"
	}
	workers := make([]*worker, min(spec.Concurrency, spec.Requests))
	for k := range workers {
		w := &worker{client: c, urls: urls, lat: newHist(), wait: newHist(), codes: make(map[string]int), start: start,
			keepIDs: spec.CheckAccepted}
		for _, t := range spec.Targets {
			cn, err := newConn(t, "/api/orders")
			if err != nil { // https: net/http speaks it
				w.close()
				w.conns = nil
				break
			}
			w.conns = append(w.conns, cn)
		}
		workers[k] = w
	}
	return workers
}

func (w *worker) close() {
	for _, cn := range w.conns {
		cn.close()
	}
}

// load is one run's sending: what every request carries, and the counters
// the workers share.
type load struct {
	spec          Spec
	plain, faulty []byte // the body tails (see bodyTails)
	start         time.Time
	sh            shared

	strike sync.Once      // calls spec.Midway
	midway sync.WaitGroup // the Midway call, while it runs
	midErr error          // what it returned
}

// strikeWhenDue calls the spec's Midway, once, as soon as MidwayAfter
// requests have been answered; the load goes on meanwhile.
func (l *load) strikeWhenDue(ctx context.Context) {
	if l.spec.Midway == nil || l.midwayCount() < int64(l.spec.MidwayAfter) {
		return
	}
	l.strike.Do(func() {
		l.midway.Go(func() {
			if err := l.spec.Midway(ctx); err != nil {
				l.midErr = fmt.Errorf("the fault in the middle of the run: %w", err)
			}
		})
	})
}

// midwayDone waits for the Midway call and returns its error, or says that
// it never came: the run ended before MidwayAfter answers.
func (l *load) midwayDone() error {
	if l.spec.Midway == nil {
		return nil
	}
	struck := true
	l.strike.Do(func() { struck = false })
	l.midway.Wait()
	if !struck {
		return fmt.Errorf("the fault was due after %d answers, and the run ended after %d", l.spec.MidwayAfter, l.midwayCount())
	}
	return l.midErr
}

// send runs the workers until every request is sent, the closed loop's
// Duration has passed or ctx ends.
func (l *load) send(ctx context.Context, workers []*worker) {
	l.strikeWhenDue(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		// The faulty requests of a run that limits them go first, one at a
		// time, so that the fault (a holder that never releases) is in
		// place before the others arrive, not at a random point among them.
		if l.spec.FaultRequests > 0 && l.spec.hasFaults() {
			l.work(ctx, workers[0], min(l.spec.FaultRequests, l.spec.Requests))
		}
		for _, w := range workers {
			wg.Go(func() { l.work(ctx, w, l.spec.Requests) })
		}
	})
	wg.Wait()
}

// work sends requests, taking their indexes from l.sh.next, until limit.
func (l *load) work(ctx context.Context, w *worker, limit int) {
	spec := l.spec
	timer := time.NewTimer(0)
	<-timer.C
	for {
		i := int(l.sh.next.Add(1) - 1)
		if i >= limit || ctx.Err() != nil {
			l.sh.next.Add(-1) // leave the index to the next phase
			return
		}
		due := time.Now()
		if spec.Rate > 0 {
			// Open loop: wait for this request's slot, then charge any
			// lateness to the latency.
			due = l.start.Add(time.Duration(float64(i) * float64(time.Second) / spec.Rate))
			if d := time.Until(due); d > 0 {
				timer.Reset(d)
				select {
				case <-ctx.Done():
					return
				case <-timer.C:
				}
			}
		} else if spec.Duration > 0 && time.Since(l.start) > time.Duration(spec.Duration) {
			return
		}
		tail := l.plain
		if spec.faulty(i) {
			tail = l.faulty
		}
		user, token := spec.UserBase+1+int64(i%spec.Buyers), ""
		if len(spec.Signed) > 0 {
			b := spec.Signed[i%len(spec.Signed)]
			user, token = b.BuyerID, b.Token
		}
		w.send(ctx, i%len(spec.Targets), user, token, tail, due, &l.sh)
		l.strikeWhenDue(ctx)
	}
}

func (l *load) snapshot() Progress {
	return Progress{RunProgress: api.RunProgress{
		Total: l.spec.Requests, Done: int(l.sh.done.Load()), OK: int(l.sh.ok.Load()),
		SoldOut: int(l.sh.soldOut.Load()), Errors: int(l.sh.errors.Load()),
	}, Elapsed: time.Since(l.start)}
}

// report calls progress, when not nil, from one goroutine: at once, then
// every progressEvery. The function it returns stops it and makes the last
// call, after the workers are done.
func (l *load) report(progress func(Progress)) (stop func()) {
	if progress == nil {
		return func() {}
	}
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		progress(l.snapshot()) // at the start: a progress bar's rate counts from it
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				progress(l.snapshot())
			}
		}
	}()
	return func() {
		close(quit)
		<-done
		progress(l.snapshot())
	}
}

// tally merges the workers' counters and histograms into row.
func tally(row *Row, workers []*worker, elapsed time.Duration) {
	lat, wait := newHist(), newHist()
	var lastSale time.Time
	row.ErrorCodes = make(map[string]int)
	for _, w := range workers {
		lat.Merge(w.lat)
		wait.Merge(w.wait)
		row.OK += w.ok
		row.Accepted += w.accepted
		row.SoldOut += w.soldOut
		row.AlreadyBought += w.already
		row.Errors += w.errs
		if w.lastSale.After(lastSale) {
			lastSale = w.lastSale
		}
		for code, n := range w.codes {
			row.ErrorCodes[code] += n
		}
		for _, s := range w.samples {
			if len(row.ErrorSamples) < maxSamples && !slices.Contains(row.ErrorSamples, s) {
				row.ErrorSamples = append(row.ErrorSamples, s)
			}
		}
	}
	if len(row.ErrorCodes) == 0 {
		row.ErrorCodes = nil
	}
	for _, w := range workers {
		for _, at := range w.soldOutAt {
			if at.Before(lastSale) {
				row.SoldOutEarly++
			}
		}
	}
	row.Requests = row.OK + row.SoldOut + row.AlreadyBought + row.Errors
	row.ElapsedS = elapsed.Seconds()
	if elapsed > 0 {
		row.RPS = float64(row.Requests) / elapsed.Seconds()
	}
	ms := func(us int64) float64 { return float64(us) / 1000 }
	row.P50MS = ms(lat.ValueAtQuantile(50))
	row.P90MS = ms(lat.ValueAtQuantile(90))
	row.P99MS = ms(lat.ValueAtQuantile(99))
	row.MaxMS = ms(lat.Max())
	row.LockWaitP99MS = ms(wait.ValueAtQuantile(99))
}

// bodyTails encodes the request fields once; a request's body is then
// `{"user_id":N,` + tail, which keeps encoding off the hot path; a signed-in
// buyer's, `{` + tail, the product alone.
func bodyTails(s Spec) (plain, faulty []byte, err error) {
	if len(s.Signed) > 0 {
		b, err := json.Marshal(api.OrderRequest{ProductID: &s.ProductID})
		if err != nil {
			return nil, nil, fmt.Errorf("encoding the order fields: %w", err)
		}
		return b[1:], b[1:], nil
	}
	// UserID stays nil, hence absent: each request writes its own.
	f := api.OrderRequest{
		ProductID: &s.ProductID, Lock: s.Lock, Mode: s.Mode,
		HoldMS: time.Duration(s.Hold).Milliseconds(), Trace: true,
	}
	if plain, err = json.Marshal(f); err != nil {
		return nil, nil, fmt.Errorf("encoding the order fields: %w", err)
	}
	f.Abandon, f.CrashBeforeExpire, f.ReleaseBeforeCommit = s.Abandon, s.CrashBeforeExpire, s.ReleaseBeforeCommit
	f.CrashAfterTake = s.CrashAfterTake
	f.Poison = s.Poison
	f.ClockSkewMS = time.Duration(s.ClockSkew).Milliseconds()
	if faulty, err = json.Marshal(f); err != nil {
		return nil, nil, fmt.Errorf("encoding the order fields: %w", err)
	}
	return plain[1:], faulty[1:], nil // drop the '{'
}

// roundTrip posts `{"user_id":N,` + tail to the target, or, for a
// signed-in buyer (token not ""), `{` + tail with the buyer's token.
func (w *worker) roundTrip(ctx context.Context, target int, user int64, token string, tail []byte) (*http.Response, error) {
	body := w.body[:0]
	if w.conns == nil {
		// A fresh body per request: the transport may still read it after
		// Do returns when the server answers early.
		body = make([]byte, 0, len(`{"user_id":,`)+20+len(tail))
	}
	body = append(body, '{')
	if token == "" {
		body = append(body, `"user_id":`...)
		body = strconv.AppendInt(body, user, 10)
		body = append(body, ',')
	}
	body = append(body, tail...)
	if w.conns != nil {
		w.body = body
		return w.conns[target].do(ctx, &w.buf, token, body)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.urls[target], bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", api.MediaType)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return w.client.Do(req)
}

// errorPeek bounds what is read of an error answer to find its code.
const errorPeek = 4 << 10

func (w *worker) send(ctx context.Context, target int, user int64, token string, tail []byte, due time.Time, sh *shared) {
	sent := time.Now()
	resp, err := w.roundTrip(ctx, target, user, token, tail)
	if err != nil {
		if ctx.Err() != nil {
			w.fail("timeout", "cancelled in flight: "+context.Cause(ctx).Error())
		} else {
			w.fail("transport", err.Error())
		}
		sh.errors.Add(1)
		sh.answered(target)
		return
	}
	if v := resp.Header.Get(api.HeaderLockWait); v != "" {
		if us, err := strconv.ParseInt(v, 10, 64); err == nil {
			_ = w.wait.RecordValue(min(max(us, histMin), histMax)) // clamped: cannot fail
		}
	}
	traced := Traced{User: user, SentUS: sent.Sub(w.start).Microseconds()}
	sale := resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusAccepted
	if sale {
		var b []byte
		if b, err = io.ReadAll(io.LimitReader(resp.Body, maxBody)); err == nil {
			var o api.Order
			_ = json.Unmarshal(b, &o) // the order is counted by its status; the trace is a bonus
			traced.Trace = o.Trace
			if w.keepIDs && resp.StatusCode == http.StatusAccepted && o.ID != "" {
				w.acceptedIDs = append(w.acceptedIDs, o.ID)
			}
		}
	} else {
		var b []byte
		b, err = io.ReadAll(io.LimitReader(resp.Body, errorPeek))
		var e api.Error
		_ = json.Unmarshal(b, &e) // a body that is not the service's error keeps an empty code
		traced.Trace = e.Trace
		switch {
		case resp.StatusCode == http.StatusConflict && e.Code == api.CodeSoldOut:
			w.soldOut++
			w.soldOutAt = append(w.soldOutAt, time.Now())
			sh.soldOut.Add(1)
		case resp.StatusCode == http.StatusConflict && e.Code == api.CodeAlreadyBought:
			w.already++
		default:
			code := e.Code
			if code == "" {
				code = "http_" + strconv.Itoa(resp.StatusCode)
			}
			w.fail(code, describe(resp.StatusCode, b))
			sh.errors.Add(1)
		}
	}
	resp.Body.Close()
	traced.RecvUS = time.Since(w.start).Microseconds()
	w.traces = append(w.traces, traced)
	_ = w.lat.RecordValue(min(max(time.Since(due).Microseconds(), histMin), histMax))
	if sale {
		if err != nil { // the order exists, but the answer was cut: say so
			w.fail("transport", "reading a "+strconv.Itoa(resp.StatusCode)+" answer: "+err.Error())
			sh.errors.Add(1)
		} else {
			w.ok++
			if resp.StatusCode == http.StatusAccepted {
				w.accepted++
			}
			w.lastSale = sent
			sh.ok.Add(1)
		}
	}
	sh.answered(target)
}
