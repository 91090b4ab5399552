package idgen

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// Snowflake layout: sign bit 0, 41 bits of milliseconds since EpochUnix
// (until 2091-09-07), 10 bits of worker ID, 12 bits of sequence.
const (
	snowflakeTimeBits   = 41
	snowflakeWorkerBits = 10
	snowflakeSeqBits    = 12

	// MaxWorkerID is the largest Snowflake worker ID.
	MaxWorkerID = 1<<snowflakeWorkerBits - 1

	snowflakeSeqMask = 1<<snowflakeSeqBits - 1
)

// Snowflake issues Twitter-style IDs with no round trip: 4096 per
// millisecond per worker. It is safe for concurrent use. IDs are unique only
// while no two live processes share a worker ID; handing those out is the
// deployment's job.
//
// When a millisecond's 4096 IDs are spent, Next waits for the next
// millisecond.
//
// The clock never makes it go back: Snowflake reads the wall clock once, in
// NewSnowflake, and from then on advances it by the monotonic clock that
// time.Now carries, so a step of the wall clock (NTP, an operator) does not
// reach its timestamps. The price: a wrong wall clock corrected after
// NewSnowflake stays wrong in its IDs until the process restarts. A clock
// without a monotonic reading (WithClock) can go back; then Next returns
// ErrClockBackwards rather than issue an ID below one it issued, until the
// clock passes the last ID's millisecond again. Across a restart nothing is
// remembered: a process that starts with its clock behind the previous one's
// last ID can reissue that process's IDs.
type Snowflake struct {
	worker int64
	now    func() time.Time
	start  time.Time     // the clock's reading at construction
	offset time.Duration // start's distance from the epoch, by the wall clock

	mu   sync.Mutex
	last int64 // millisecond of the last ID; -1 before the first
	seq  int64 // sequence of the last ID within last
}

// NewSnowflake returns a generator for the worker ID, which must lie in
// 0..MaxWorkerID.
func NewSnowflake(worker int64, opts ...Option) (*Snowflake, error) {
	if worker < 0 || worker > MaxWorkerID {
		return nil, fmt.Errorf("%w: %d", ErrWorkerID, worker)
	}
	o := newOptions(opts)
	start := o.now()
	return &Snowflake{
		worker: worker,
		now:    o.now,
		start:  start,
		offset: start.Sub(epoch), // by the wall clock: epoch has no monotonic reading
		last:   -1,
	}, nil
}

// Next returns a new ID.
func (s *Snowflake) Next() (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ms, err := s.millis()
	if err != nil {
		return 0, err
	}
	switch {
	case ms > s.last:
		s.seq = 0
	case ms == s.last && s.seq < snowflakeSeqMask:
		s.seq++
	case ms == s.last:
		if ms, err = s.waitPast(s.last); err != nil {
			return 0, err
		}
		s.seq = 0
	default:
		return 0, fmt.Errorf("%w: %dms behind the last id", ErrClockBackwards, s.last-ms)
	}
	s.last = ms
	return ms<<(snowflakeWorkerBits+snowflakeSeqBits) | s.worker<<snowflakeSeqBits | s.seq, nil
}

// NextString returns Next in decimal.
func (s *Snowflake) NextString(context.Context) (string, error) {
	id, err := s.Next()
	if err != nil {
		return "", err
	}
	return strconv.FormatInt(id, 10), nil
}

// since returns the time since the epoch: the wall clock at construction
// plus the monotonic time elapsed since.
func (s *Snowflake) since() time.Duration { return s.offset + s.now().Sub(s.start) }

func (s *Snowflake) millis() (int64, error) {
	d := s.since()
	ms, err := ticks(d, time.Millisecond, snowflakeTimeBits)
	if err != nil {
		return 0, fmt.Errorf("%w: %v after the epoch", err, d)
	}
	return ms, nil
}

// waitPast sleeps until the clock reaches a millisecond after last. Other
// callers wait on the mutex meanwhile: they need that millisecond too.
func (s *Snowflake) waitPast(last int64) (int64, error) {
	for {
		ms, err := s.millis()
		if err != nil || ms > last {
			return ms, err
		}
		if ms < last {
			return 0, fmt.Errorf("%w: %dms behind the last id", ErrClockBackwards, last-ms)
		}
		time.Sleep(time.Duration(last+1)*time.Millisecond - s.since())
	}
}
