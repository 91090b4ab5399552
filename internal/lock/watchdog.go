package lock

import (
	"context"
	_ "embed"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed renew.lua
var renewLua string

var renewScript = redis.NewScript(renewLua)

// Watchdog is Token with Redisson's watchdog: while the lease is held, a
// timer renews it every TTL/3, so a holder that is slow (paused by GC, a
// slow call) keeps its lock and nobody enters beside it, while a holder that
// dies stops renewing and its lock expires after one TTL. If a renewal finds
// the lock gone, or no renewal has succeeded for a whole TTL, the lease's
// Lost channel (see the package function Lost) is closed so the holder can
// stop.
//
// What it does not fix: a holder that hangs but whose process lives holds the
// lock for ever, since renewal proves the process alive, not its progress;
// and a pause of the whole process (a stop-the-world pause, a frozen VM)
// stops the renewals too, so the lock expires and Lost fires only when the
// process wakes, after the next holder has begun. Only fencing makes that
// safe.
//
// Round trips: Token's, plus one every TTL/3 while held.
type Watchdog struct {
	token *Token
}

var _ Locker = (*Watchdog)(nil)

// NewWatchdog returns a self-renewing token lock on rdb. Close it to end its
// subscription.
func NewWatchdog(rdb RedisClient) *Watchdog { return &Watchdog{token: NewToken(rdb)} }

// Acquire takes the lock as Token does and starts renewing it.
func (w *Watchdog) Acquire(ctx context.Context, key string, opt Options) (Lease, error) {
	tl, err := w.token.acquire(ctx, key, opt)
	if err != nil {
		return nil, err
	}
	l := &watchdogLease{tokenLease: tl, ctx: ctx, ttl: opt.ttl(), renewed: time.Now()}
	// A timer rather than a goroutine with a ticker: nothing runs, and
	// nothing is allocated, between renewals, and Release need not wait
	// for a goroutine to notice that it should end. The mutex orders the
	// assignment before the first renewal.
	l.mu.Lock()
	l.timer = time.AfterFunc(l.period(), l.renew)
	l.mu.Unlock()
	return l, nil
}

// Close ends the subscription that wakes waiters, and waits for its
// goroutine. Leases already held keep renewing until released.
func (w *Watchdog) Close() error { return w.token.Close() }

type watchdogLease struct {
	tokenLease
	// ctx is Acquire's: the renewals outlive its cancellation (a
	// request's, typically) and end with the lease, but keep its values
	// for tracing.
	ctx context.Context
	ttl time.Duration

	timer *time.Timer // the next renewal, run by the timer's goroutine
	mu    sync.Mutex
	// cancel aborts the renewal in flight; nil between renewals.
	cancel  context.CancelFunc
	halted  bool           // no renewal is to start any more
	running sync.WaitGroup // the renewal in flight
	renewed time.Time      // the last confirmed renewal (or the acquisition)
	gone    bool           // a renewal found the lock lost
	lost    chan struct{}  // made by Lost; closed when gone
}

// period is the time between renewals: a third of the TTL leaves two more
// attempts before the lock expires when one renewal is slow or fails.
func (l *watchdogLease) period() time.Duration { return max(l.ttl/3, time.Millisecond) }

// renew extends the lock once and schedules the next renewal, unless the
// lease was halted or the lock is lost.
func (l *watchdogLease) renew() {
	l.mu.Lock()
	if l.halted {
		l.mu.Unlock()
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(l.ctx), l.period())
	l.cancel = cancel
	l.running.Add(1)
	l.mu.Unlock()
	defer l.running.Done()

	n, err := renewScript.Run(ctx, l.rdb, []string{l.key}, l.value, l.ttl.Milliseconds()).Int()
	cancel()

	l.mu.Lock()
	defer l.mu.Unlock()
	l.cancel = nil
	switch {
	case l.halted:
		return
	case err == nil && n == 1:
		l.renewed = time.Now()
	case err == nil, time.Since(l.renewed) >= l.ttl:
		// Gone, or unconfirmed for longer than it can have lasted.
		l.gone = true
		if l.lost != nil {
			close(l.lost)
		}
		return
	}
	// Renewed, or a failed renewal with time left: the next one tries again.
	l.timer.Reset(l.period())
}

// halt stops the renewals and waits for one in flight to end.
func (l *watchdogLease) halt() {
	l.mu.Lock()
	l.halted = true
	l.timer.Stop()
	if l.cancel != nil {
		l.cancel()
	}
	l.mu.Unlock()
	l.running.Wait()
}

// Release stops the renewals, then releases as Token does.
func (l *watchdogLease) Release(ctx context.Context) error {
	l.halt()
	return l.tokenLease.Release(ctx)
}

// Lost is closed when a renewal finds the lock no longer this lease's. It
// is made on first use: most holders never ask.
func (l *watchdogLease) Lost() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost == nil {
		l.lost = make(chan struct{})
		if l.gone {
			close(l.lost)
		}
	}
	return l.lost
}

// Abandon stops the renewals without releasing, as a crashed holder would.
func (l *watchdogLease) Abandon() { l.halt() }
