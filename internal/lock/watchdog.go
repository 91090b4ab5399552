package lock

import (
	"context"
	_ "embed"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed renew.lua
var renewLua string

var renewScript = redis.NewScript(renewLua)

// Watchdog is Token with Redisson's watchdog: while the lease is held, a
// goroutine renews it every TTL/3, so a holder that is slow (paused by GC, a
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
	// The renewals outlive Acquire's context (a request's, typically) and
	// end with the lease; they keep its values for tracing.
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l := &watchdogLease{tokenLease: tl, cancel: cancel, lost: make(chan struct{}), done: make(chan struct{})}
	go l.renew(rctx, opt.ttl())
	return l, nil
}

// Close ends the subscription that wakes waiters, and waits for its
// goroutine. Leases already held keep renewing until released.
func (w *Watchdog) Close() error { return w.token.Close() }

type watchdogLease struct {
	*tokenLease
	cancel context.CancelFunc
	lost   chan struct{} // closed by renew when the lock is found lost
	done   chan struct{} // closed when renew returns
}

// renew extends the lock every ttl/3 until cancelled or the lock is lost.
// A third of the TTL leaves two more attempts before the lock expires when
// one renewal is slow or fails.
func (l *watchdogLease) renew(ctx context.Context, ttl time.Duration) {
	defer close(l.done)
	tick := time.NewTicker(max(ttl/3, time.Millisecond)) // a ticker needs a positive period
	defer tick.Stop()
	renewed := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		cctx, cancel := context.WithTimeout(ctx, max(ttl/3, time.Millisecond))
		n, err := renewScript.Run(cctx, l.rdb, []string{l.key}, l.value, ttl.Milliseconds()).Int()
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err == nil && n == 1:
			renewed = time.Now()
			continue
		case err == nil, time.Since(renewed) >= ttl:
			// Gone, or unconfirmed for longer than it can have lasted.
			close(l.lost)
			return
		}
		// A failed renewal with time left: the next tick tries again.
	}
}

// halt stops the renewals and waits for them to end.
func (l *watchdogLease) halt() {
	l.cancel()
	<-l.done
}

// Release stops the renewals, then releases as Token does.
func (l *watchdogLease) Release(ctx context.Context) error {
	l.halt()
	return l.tokenLease.Release(ctx)
}

// Lost is closed when a renewal finds the lock no longer this lease's.
func (l *watchdogLease) Lost() <-chan struct{} { return l.lost }

// Abandon stops the renewals without releasing, as a crashed holder would.
func (l *watchdogLease) Abandon() { l.halt() }
