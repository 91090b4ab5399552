package stock

import (
	"errors"
	"time"

	"seckill/internal/api"
)

// Trace records a purchase's critical sections, for the lab's timeline. A
// nil *Trace records nothing: every method returns at once, so a purchase
// that did not ask for one pays a nil check, no clock read and no
// allocation.
type Trace struct {
	start    time.Time
	sections []api.TraceSection
}

// NewTrace starts a trace at the receipt of the request.
func NewTrace() *Trace { return &Trace{start: time.Now()} }

// API returns the trace as the contract carries it. locked says whether a
// lock was really held: without one (lock none) the acquire and release
// times are the no-op lease's, and the section runs from read to write.
func (t *Trace) API(locked bool) *api.Trace {
	if t == nil {
		return nil
	}
	out := &api.Trace{ReceivedUnixUS: t.start.UnixMicro(), TookUS: *t.now(), Sections: t.sections}
	if out.Sections == nil {
		out.Sections = []api.TraceSection{}
	}
	if !locked {
		for i := range out.Sections {
			out.Sections[i].AcquireUS, out.Sections[i].ReleaseUS, out.Sections[i].LeaseUS = nil, nil, 0
		}
	}
	return out
}

func (t *Trace) now() *int64 {
	us := time.Since(t.start).Microseconds()
	return &us
}

// cur is the section being recorded.
func (t *Trace) cur() *api.TraceSection { return &t.sections[len(t.sections)-1] }

// acquired opens a section on shard: its lock was obtained.
func (t *Trace) acquired(shard int, token uint64, lease time.Duration) {
	if t == nil {
		return
	}
	t.sections = append(t.sections, api.TraceSection{Shard: shard, Token: token, LeaseUS: lease.Microseconds(),
		AcquireUS: t.now(), Outcome: api.OutcomeFailed})
}

// sent opens a section on shard for an atomic take, whose one step was sent.
func (t *Trace) sent(shard int) {
	if t == nil {
		return
	}
	t.sections = append(t.sections, api.TraceSection{Shard: shard, WriteUS: t.now(), Outcome: api.OutcomeFailed})
}

// read and write copy n after the nil check: taking n's own address would
// move it to the heap on every call, traced or not.
func (t *Trace) read(n int) {
	if t == nil {
		return
	}
	v := n
	s := t.cur()
	s.ReadUS, s.Read = t.now(), &v
}

func (t *Trace) write(n int) {
	if t == nil {
		return
	}
	v := n
	s := t.cur()
	s.WriteUS, s.Wrote = t.now(), &v
}

func (t *Trace) releasing() {
	if t == nil {
		return
	}
	t.cur().ReleaseUS = t.now()
}

func (t *Trace) leaseLost() {
	if t == nil {
		return
	}
	t.cur().LeaseLost = true
}

// Commit notes that the section's transaction sends its COMMIT.
func (t *Trace) Commit() {
	if t == nil || len(t.sections) == 0 {
		return
	}
	t.cur().CommitUS = t.now()
}

// done closes the section with the take's outcome: taken, or the error
// that ended it (nil: the shard was empty).
func (t *Trace) done(taken bool, err error) {
	if t == nil || len(t.sections) == 0 {
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
