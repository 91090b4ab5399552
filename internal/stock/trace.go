package stock

import (
	"errors"
	"time"

	"seckill/internal/api"
)

// Trace records a purchase's critical sections, for the lab's timeline,
// through the hooks it gives the take (Hooks). A purchase that did not ask
// for one has no hooks: it pays a nil check, no clock read and no
// allocation.
type Trace struct {
	start    time.Time
	sections []Section
}

// NewTrace starts a trace at the receipt of the request.
func NewTrace() *Trace { return &Trace{start: time.Now()} }

// Section is one shard tried: for a lock strategy, from the lock obtained
// to the release sent; without a lock, from the read to the write. Times
// are microseconds since the trace began, on the monotonic clock; a time is
// nil when the step did not happen.
type Section struct {
	Shard int
	// Token is the lock's fencing token, 0 for a lock without one.
	Token uint64
	// LeaseUS is the lease the lock was taken with, 0 without a lock or for
	// the modes that take none.
	LeaseUS int64
	// AcquireUS is when the lock was obtained (its reply received).
	AcquireUS *int64
	// ReadUS and Read: when the stock was read (the reply received) and the
	// value read.
	ReadUS *int64
	Read   *int
	// WriteUS and Wrote: when the write was sent and the value it carried.
	// An atomic take (lua, db) has a write time and no values.
	WriteUS *int64
	Wrote   *int
	// CommitUS is when the transaction's COMMIT was sent (sqlrmw, db).
	CommitUS *int64
	// ReleaseUS is when the release was sent.
	ReleaseUS *int64
	// DoneUS is when the section ended: the write's reply (atomic takes),
	// or the commit's.
	DoneUS *int64
	// LeaseLost: the release found the lock no longer this holder's.
	LeaseLost bool
	// Outcome is one of api's Outcome constants.
	Outcome string
}

// Hooks are the moments the trace records; nil for a nil trace.
func (t *Trace) Hooks() *Hooks {
	if t == nil {
		return nil
	}
	return &Hooks{Acquired: t.acquired, Sent: t.sent, Read: t.read, Write: t.write,
		Releasing: t.releasing, LeaseLost: t.leaseLost, Done: t.done, Commit: t.commit}
}

// Began is when the trace began, on the wall clock.
func (t *Trace) Began() time.Time { return t.start }

// Took is the time since the trace began.
func (t *Trace) Took() time.Duration { return time.Since(t.start) }

// Sections are the sections recorded, in order; none for a nil trace.
func (t *Trace) Sections() []Section {
	if t == nil {
		return nil
	}
	return t.sections
}

func (t *Trace) now() *int64 {
	us := time.Since(t.start).Microseconds()
	return &us
}

// cur is the section being recorded.
func (t *Trace) cur() *Section { return &t.sections[len(t.sections)-1] }

// acquired opens a section on shard: its lock was obtained.
func (t *Trace) acquired(shard int, token uint64, lease time.Duration) {
	t.sections = append(t.sections, Section{Shard: shard, Token: token, LeaseUS: lease.Microseconds(),
		AcquireUS: t.now(), Outcome: api.OutcomeFailed})
}

// sent opens a section on shard for an atomic take, whose one step was sent.
func (t *Trace) sent(shard int) {
	t.sections = append(t.sections, Section{Shard: shard, WriteUS: t.now(), Outcome: api.OutcomeFailed})
}

func (t *Trace) read(n int) {
	s := t.cur()
	s.ReadUS, s.Read = t.now(), &n
}

func (t *Trace) write(n int) {
	s := t.cur()
	s.WriteUS, s.Wrote = t.now(), &n
}

func (t *Trace) releasing() {
	t.cur().ReleaseUS = t.now()
}

func (t *Trace) leaseLost() {
	t.cur().LeaseLost = true
}

// commit notes that the section's transaction sends its COMMIT.
func (t *Trace) commit() {
	if len(t.sections) == 0 {
		return
	}
	t.cur().CommitUS = t.now()
}

// done closes the section with the take's outcome: taken, or the error
// that ended it (nil: the shard was empty).
func (t *Trace) done(taken bool, err error) {
	if len(t.sections) == 0 {
		return
	}
	s := t.cur()
	if s.DoneUS == nil {
		s.DoneUS = t.now()
	}
	switch {
	case taken:
		s.Outcome = api.OutcomeTaken
	case err == nil:
		s.Outcome = api.OutcomeEmpty
	case errors.Is(err, ErrLeaseLost):
		s.Outcome = api.OutcomeRefused
	case errors.Is(err, ErrAlreadyBought):
		s.Outcome = api.OutcomeBefore
	}
}
