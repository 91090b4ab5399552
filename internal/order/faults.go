package order

import (
	"context"
	"strings"
	"time"

	"seckill/internal/lock"
	"seckill/internal/stock"
)

// Faults inject the lab's failures into one purchase, each at its moment:
// those of the take become the take's hooks (Hooks), the lock's ride in
// its options (lock.Fault), and the crash after the take is the
// purchase's own. A mode without the moment of a fault refuses it
// (refuseFaults).
type Faults struct {
	// Hold pauses inside the critical section, between the read and the
	// write, as a GC pause or a slow call would: to widen the race window,
	// or to outlive the lease. With ReleaseBeforeCommit it is spent before
	// the COMMIT instead.
	Hold time.Duration
	// Abandon leaves the lock held, as a holder that crashed would.
	Abandon bool
	// CrashAfterTake stops the purchase between the take and the order's
	// write (the mq mode: its publish), as a process that died there
	// would: the unit stays taken and no order comes. The async, db and
	// sqlrmw modes have no such moment, and refuse it.
	CrashAfterTake bool
	// Lock carries the strategy-level faults: a crash between SETNX and
	// EXPIRE, a skewed client clock.
	Lock lock.Fault
	// ReleaseBeforeCommit releases the sqlrmw mode's lock before its
	// transaction commits (MySQL only: see plan).
	ReleaseBeforeCommit bool
	// Poison queues the async mode's order under poisonKey, with a row
	// the database refuses: it goes to the dead letters. MySQL only:
	// SQLite keeps no column sizes and would store it.
	Poison bool
}

// Hooks are the faults' moments in a take; nil when none has one.
func (f Faults) Hooks() *stock.Hooks {
	if f.Hold <= 0 && !f.Abandon && !f.ReleaseBeforeCommit && !f.Poison {
		return nil
	}
	h := &stock.Hooks{}
	if f.Abandon {
		h.KeepLock = func() bool { return true }
	}
	if f.Poison {
		h.QueueKey = func(string) string { return poisonKey }
	}
	switch {
	case f.ReleaseBeforeCommit:
		// The hold, spent here as a slow disk or a GC pause would: the
		// next holder reads before this COMMIT every time.
		h.Committing = func(ctx context.Context, release func()) error {
			release()
			return pauseFor(ctx, f.Hold)
		}
	case f.Hold > 0:
		h.Inside = func(ctx context.Context) error { return pauseFor(ctx, f.Hold) }
	}
	return h
}

// poisonKey is the idempotency key of a poisoned queued order: 80
// characters, more than the orders' column holds, so a database that keeps
// column sizes refuses its row. The ledger and the buyer keep the real key.
var poisonKey = "poison-" + strings.Repeat("x", 73)
