package stock

import (
	"context"
	"slices"
	"time"
)

// Hooks are the moments of one take, for whoever watches or bends it: the
// lab's trace (Trace.Hooks) and its faults, which the lab's side builds.
// Modelled on net/http/httptrace.ClientTrace: every field is optional, a
// take calls each at its moment, and Compose lets several hook one take.
// A nil *Hooks (every sale to the public) costs each moment a nil check.
type Hooks struct {
	// Acquired: the shard's lock was obtained (its reply received), with
	// its fencing token (0 for none) and the lease it was taken with.
	Acquired func(shard int, token uint64, lease time.Duration)
	// KeepLock is asked once the lock is obtained: true leaves it held
	// and stops its renewal there (lock.Abandon), as a holder that
	// crashed would; the lock lives out its lease.
	KeepLock func() bool
	// Sent: the one step of an atomic take (lua, mq, async, db) was sent
	// to shard.
	Sent func(shard int)
	// Read: a read-modify-write read n (the reply received).
	Read func(n int)
	// Inside runs in the critical section, between the read and the
	// write, in the take's context: an error ends the take with it,
	// nothing written.
	Inside func(ctx context.Context) error
	// Write: the write carrying n is sent.
	Write func(n int)
	// Releasing: the lock's release is sent.
	Releasing func()
	// LeaseLost: the release found the lock no longer this holder's.
	LeaseLost func()
	// Done: the shard's try ended, taken or not; err is what ended it
	// (nil with taken false: the shard was empty).
	Done func(taken bool, err error)
	// QueueKey returns the idempotency key the async take queues its order
	// under, given the buyer's (which the ledger and the buyer keep).
	QueueKey func(key string) string
	// Committing runs when the caller of a take in SQL (db, sqlrmw) is
	// about to send its transaction's COMMIT: an error rolls it back.
	// release gives up, before the COMMIT, the lock the take left held
	// for after it (Taken.Held); it does nothing when none is. The caller
	// runs it through BeforeCommit.
	Committing func(ctx context.Context, release func()) error
	// Commit: that COMMIT is sent now, its Committing hooks run. The
	// caller runs it through SendingCommit, beside the COMMIT itself.
	Commit func()
}

// Compose returns hooks that call each of hs's at every moment, in the
// order given: nil when none is left once the nil ones are dropped. An
// Inside or Committing error stops the ones after it; the lock is kept
// when any of hs keeps it; QueueKey's pass the key along.
func Compose(hs ...*Hooks) *Hooks {
	var one *Hooks
	n := 0
	for _, h := range hs {
		if h != nil {
			one, n = h, n+1
		}
	}
	if n < 2 {
		return one // no allocation for a purchase hooked once or not at all
	}
	// A copy, which the closures keep: the caller's slice stays its own,
	// and on the stack.
	return composed(slices.DeleteFunc(slices.Clone(hs), func(h *Hooks) bool { return h == nil }))
}

func composed(hs []*Hooks) *Hooks {
	return &Hooks{
		Acquired: func(shard int, token uint64, lease time.Duration) {
			each(hs, func(h *Hooks) { h.acquired(shard, token, lease) })
		},
		KeepLock:  func() bool { return slices.ContainsFunc(hs, (*Hooks).keepLock) },
		Sent:      func(shard int) { each(hs, func(h *Hooks) { h.sent(shard) }) },
		Read:      func(n int) { each(hs, func(h *Hooks) { h.read(n) }) },
		Inside:    func(ctx context.Context) error { return first(hs, func(h *Hooks) error { return h.inside(ctx) }) },
		Write:     func(n int) { each(hs, func(h *Hooks) { h.write(n) }) },
		Releasing: func() { each(hs, (*Hooks).releasing) },
		LeaseLost: func() { each(hs, (*Hooks).leaseLost) },
		Done:      func(taken bool, err error) { each(hs, func(h *Hooks) { h.done(taken, err) }) },
		QueueKey: func(key string) string {
			for _, h := range hs {
				key = h.queueKey(key)
			}
			return key
		},
		Committing: func(ctx context.Context, release func()) error {
			return first(hs, func(h *Hooks) error { return h.BeforeCommit(ctx, release) })
		},
		Commit: func() { each(hs, (*Hooks).SendingCommit) },
	}
}

func each(hs []*Hooks, f func(*Hooks)) {
	for _, h := range hs {
		f(h)
	}
}

// first runs f on each of hs until one fails.
func first(hs []*Hooks, f func(*Hooks) error) error {
	for _, h := range hs {
		if err := f(h); err != nil {
			return err
		}
	}
	return nil
}

// The moments, as a take calls them: each returns at once on a nil *Hooks
// or a nil field, and is small enough to be inlined at its call.

func (h *Hooks) acquired(shard int, token uint64, lease time.Duration) {
	if h != nil && h.Acquired != nil {
		h.Acquired(shard, token, lease)
	}
}

func (h *Hooks) keepLock() bool { return h != nil && h.KeepLock != nil && h.KeepLock() }

func (h *Hooks) sent(shard int) {
	if h != nil && h.Sent != nil {
		h.Sent(shard)
	}
}

func (h *Hooks) read(n int) {
	if h != nil && h.Read != nil {
		h.Read(n)
	}
}

func (h *Hooks) inside(ctx context.Context) error {
	if h == nil || h.Inside == nil {
		return nil
	}
	return h.Inside(ctx)
}

func (h *Hooks) write(n int) {
	if h != nil && h.Write != nil {
		h.Write(n)
	}
}

func (h *Hooks) releasing() {
	if h != nil && h.Releasing != nil {
		h.Releasing()
	}
}

func (h *Hooks) leaseLost() {
	if h != nil && h.LeaseLost != nil {
		h.LeaseLost()
	}
}

func (h *Hooks) done(taken bool, err error) {
	if h != nil && h.Done != nil {
		h.Done(taken, err)
	}
}

func (h *Hooks) queueKey(key string) string {
	if h == nil || h.QueueKey == nil {
		return key
	}
	return h.QueueKey(key)
}

// BeforeCommit runs Committing, for the caller of a take in SQL about to
// send its COMMIT; nil hooks return nil at once.
func (h *Hooks) BeforeCommit(ctx context.Context, release func()) error {
	if h == nil || h.Committing == nil {
		return nil
	}
	return h.Committing(ctx, release)
}

// SendingCommit runs Commit, for the caller of a take in SQL in the
// statement that sends its COMMIT; nil hooks do nothing.
func (h *Hooks) SendingCommit() {
	if h != nil && h.Commit != nil {
		h.Commit()
	}
}
