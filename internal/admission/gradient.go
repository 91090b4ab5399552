package admission

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Gradient is our own adaptive concurrency limit, because the maintained Go
// port of Netflix's concurrency-limits (platinummonkey/go-concurrency-limits)
// cannot be fetched here (the module proxy answers 403). It follows the
// library's Gradient2Limit fed by its WindowedLimit (Netflix/concurrency-limits,
// concurrency-limits-core, limit/Gradient2Limit.java and WindowedLimit.java):
//
//   - samples are averaged over a window of at least WindowSamples samples and
//     MinWindow, or twice the last window's average RTT when that is longer,
//     at most MaxWindow (WindowedLimit);
//   - the long-term RTT is an exponential average of the windows' RTTs, a plain
//     mean over the first ten (ExpAvgMeasurement(LongWindow, 10)), pulled down
//     by 5% whenever it is over twice the window's, so that it forgets an
//     overload once latency is back;
//   - gradient = clamp(Tolerance × long RTT / window RTT, 0.5, 1): 1 while
//     latency holds, below 1 once requests queue;
//   - limit = limit×(1−Smoothing) + (limit×gradient + Queue)×Smoothing, within
//     [Min, Max]; not changed by a window whose in-flight peak stayed under half
//     the limit (the load, not the service, set its latency).
//
// Ours differs in one point: a window in which a request failed (a backend
// error, a timeout) may shrink the limit but never grows it (no Queue term),
// since a backend answering errors fast says nothing about spare capacity.
//
// Acquire never waits: a request over the limit is refused at once, with no
// round trip, which is the point of shedding.
type Gradient struct {
	opt      GradientOptions
	inflight atomic.Int64
	limit    atomic.Int64 // the estimate rounded down, read by Acquire
	admitted atomic.Int64
	shed     atomic.Int64
	release  func(time.Duration, bool) // g.done, bound once: Acquire allocates nothing

	mu       sync.Mutex // guards the rest
	estimate float64
	long     float64 // the long-term RTT, in nanoseconds
	longN    int     // windows averaged into long, up to the warm-up's ten
	win      window
}

// window is the samples of the window being filled.
type window struct {
	end    time.Time // it closes at the first release at or after end ...
	n      int       // ... that finds at least WindowSamples samples in it
	sum    time.Duration
	peak   int64 // the most requests in flight seen at a release
	failed bool
}

// ErrOverloaded: the request was shed: as many requests as the concurrency
// limit allows were in flight.
var ErrOverloaded = errors.New("admission: overloaded, try again shortly")

// RetryAfter is the wait a shed request is told. A slot frees within one
// purchase's latency (milliseconds), so the service needs no wait at all;
// the wait is for the crowd, and one second is the shortest Retry-After can
// say (whole seconds). A flash sale may be over within seconds: longer would
// turn a shed into a lost chance.
const RetryAfter = time.Second

// GradientOptions configure a Gradient; a zero field takes its default.
// The defaults are Gradient2's unless the comment says why not.
type GradientOptions struct {
	// Initial is the limit before any window closed. Default: 20.
	Initial int
	// Min is the lowest limit. Default: 20, or Max when lower. A purchase
	// mostly waits on Redis and the database, which serve more at once than
	// the cores; a floor of 4 did no better in BenchmarkBuyOverload.
	Min int
	// Max is the highest limit. Default: 200.
	Max int
	// Queue is how much the limit grows per window while latency holds
	// (before smoothing). Default: 4.
	Queue float64
	// Smoothing is how much of the new estimate a window takes, in (0, 1].
	// Default: 0.2.
	Smoothing float64
	// Tolerance is the rise of the window's RTT over the long-term RTT that is
	// not yet queueing, ≥ 1. Default: 1.5.
	Tolerance float64
	// LongWindow is how many windows the long-term RTT averages over.
	// Default: 600.
	LongWindow int
	// WindowSamples is the fewest samples a window closes with. Default: 10.
	WindowSamples int
	// MinWindow is the shortest window. Default: 10ms, not Gradient2's 1s: a
	// sale's opening herd lasts about a second, and the limit must answer
	// within it.
	MinWindow time.Duration
	// MaxWindow is the longest window. Default: 1s.
	MaxWindow time.Duration
	// Now is the clock the windows are timed on (not the samples, whose
	// RTT the caller measures). Default: time.Now.
	Now func() time.Time
}

func (o GradientOptions) withDefaults() GradientOptions {
	or := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	orF := func(v *float64, d float64) {
		if *v <= 0 {
			*v = d
		}
	}
	or(&o.Initial, 20)
	or(&o.Max, 200)
	or(&o.Min, min(20, o.Max)) // a Max below the default Min is the ceiling asked for
	or(&o.LongWindow, 600)
	or(&o.WindowSamples, 10)
	orF(&o.Queue, 4)
	orF(&o.Smoothing, 0.2)
	orF(&o.Tolerance, 1.5)
	o.Smoothing = min(o.Smoothing, 1)
	o.Tolerance = max(o.Tolerance, 1)
	o.Max = max(o.Max, o.Min)
	o.Initial = min(max(o.Initial, o.Min), o.Max)
	if o.MinWindow <= 0 {
		o.MinWindow = 10 * time.Millisecond
	}
	if o.MaxWindow <= 0 {
		o.MaxWindow = time.Second
	}
	o.MaxWindow = max(o.MaxWindow, o.MinWindow)
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// NewGradient returns a limit at opt.Initial with nothing in flight.
func NewGradient(opt GradientOptions) *Gradient {
	g := &Gradient{opt: opt.withDefaults()}
	g.estimate = float64(g.opt.Initial)
	g.limit.Store(int64(g.opt.Initial))
	g.release = g.done
	return g
}

// Acquire admits a request if fewer than the limit are in flight, else
// refuses it with ErrOverloaded. An admitted request must call release
// exactly once, with its latency and whether a backend failed it (an error
// or a timeout, not a refusal such as sold out).
func (g *Gradient) Acquire() (release func(rtt time.Duration, failed bool), err error) {
	for {
		n := g.inflight.Load()
		if n >= g.limit.Load() {
			g.shed.Add(1)
			return nil, ErrOverloaded
		}
		if g.inflight.CompareAndSwap(n, n+1) {
			g.admitted.Add(1)
			return g.release, nil
		}
	}
}

// done is every token's release.
func (g *Gradient) done(rtt time.Duration, failed bool) {
	n := g.inflight.Add(-1) + 1 // in flight with this one
	now := g.opt.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	w := &g.win
	w.n++
	w.sum += max(rtt, 0)
	w.peak = max(w.peak, n)
	w.failed = w.failed || failed
	if w.n < g.opt.WindowSamples || now.Before(w.end) {
		return
	}
	avg := w.sum / time.Duration(w.n)
	g.update(float64(max(avg, 1)), w.peak, w.failed)
	*w = window{end: now.Add(min(max(2*avg, g.opt.MinWindow), g.opt.MaxWindow))}
}

// update is Gradient2Limit._update for one window; short is its average
// RTT in nanoseconds. Called with mu held.
func (g *Gradient) update(short float64, peak int64, failed bool) {
	o := g.opt
	if g.longN < 10 { // the warm-up: a plain mean
		g.longN++
		g.long += (short - g.long) / float64(g.longN)
	} else {
		f := 2 / float64(o.LongWindow+1)
		g.long = g.long*(1-f) + short*f
	}
	if g.long/short > 2 {
		g.long *= 0.95
	}
	if float64(peak) < g.estimate/2 {
		return
	}
	gradient := min(max(o.Tolerance*g.long/short, 0.5), 1)
	grow := o.Queue
	if failed {
		grow = 0
	}
	next := g.estimate*(1-o.Smoothing) + (g.estimate*gradient+grow)*o.Smoothing
	g.estimate = min(max(next, float64(o.Min)), float64(o.Max))
	g.limit.Store(int64(g.estimate))
}

// Limit is the current limit.
func (g *Gradient) Limit() int { return int(g.limit.Load()) }

// InFlight is the number of requests admitted and not released.
func (g *Gradient) InFlight() int { return int(g.inflight.Load()) }

// Admitted is the number of requests admitted so far.
func (g *Gradient) Admitted() int64 { return g.admitted.Load() }

// Shed is the number of requests refused with ErrOverloaded so far.
func (g *Gradient) Shed() int64 { return g.shed.Load() }
