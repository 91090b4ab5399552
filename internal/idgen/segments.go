package idgen

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
)

// Segments issues IDs of Redis's shape, seconds<<32 | the day's sequence
// number, without a round trip: each process reserves a block (a segment)
// of the day's sequence numbers in Blocks and draws it in memory, and
// reserves the next one in the background once half of one is used (the
// double-buffered segments of Meituan's Leaf). No key is hot: a process
// meets the store once a block, and Redis not at all.
//
// Unique: a sequence number is handed to one block only (the store's
// ceiling only moves up), a block to one process, and a second falls in one
// day; so two IDs of one second have two sequence numbers, across
// processes, restarts and failovers of Redis or of the database (its
// reservations are as durable as its commits). A restart skips the rest of
// its blocks.
//
// Ordered: IDs sort by the second they were drawn in, as far as the
// processes' clocks agree, and one process's IDs increase in the order it
// drew them (its clock not going back). What is lost against one counter
// in Redis: within a second, IDs of different processes sort by the blocks
// they draw from, not by when they were drawn (a process that reserved
// later sorts after, though it drew first).
//
// Its day keys are Redis's (dayKey) and share their rows of id_blocks, so
// processes of both kinds on one database issue disjoint numbers.
type Segments struct {
	blocks           Blocks
	prefix           string
	now              func() time.Time
	minStep, maxStep uint32

	mu        sync.Mutex
	cur, next segment
	// step is the size of the next block; reservedAt when the last
	// reservation began, which the step is sized by.
	step       uint32
	reservedAt time.Time
	// fetching is non-nil while a reservation runs, one at a time, and
	// closed when it ends. retryAt: none is made ahead of need before it
	// (the last one failed).
	fetching chan struct{}
	retryAt  time.Time
	closed   bool
	bg       sync.WaitGroup
	bgCtx    context.Context
	stop     context.CancelFunc
}

// segment is a block of a day's sequence numbers, (last, to] left of it.
// Days count from the epoch (a midnight, UTC), from 1: the zero segment is
// none.
type segment struct {
	day      int64
	last, to uint64
	size     uint64
}

func (s segment) left() uint64 { return s.to - s.last }

// Defaults of the steps: a block is sized by use between them (see
// sizeStep), starting at the least.
const (
	DefaultMinStep = 1 << 16
	DefaultMaxStep = 1 << 22
)

// How a block's life sizes the next, as Leaf does: a block that lasted
// under growUnder doubles the next, one that lasted over shrinkOver halves
// it. A block is what a restart skips and what half of covers a database
// outage: a quiet process skips few numbers, and a busy one meets the
// database a few times an hour. At 4Mi a block, a day's 2^32 numbers
// allow a thousand restarts.
const (
	growUnder  = 15 * time.Minute
	shrinkOver = 30 * time.Minute
)

// dayAhead is how long before midnight the next day's block is reserved,
// so that the first draws of a day do not wait for the database.
const dayAhead = time.Minute

// WithSteps bounds the size of the blocks Segments reserves; a bound of 0
// keeps its default. Redis and Snowflake ignore it. Default:
// DefaultMinStep, DefaultMaxStep.
func WithSteps(least, most uint32) Option {
	return func(o *options) { o.minStep, o.maxStep = least, most }
}

// NewSegments returns a generator whose blocks blocks reserves under the day
// keys of prefix (see NewRedis). Close stops its reservations ahead of need.
func NewSegments(blocks Blocks, prefix string, opts ...Option) *Segments {
	o := newOptions(opts)
	least, most := o.minStep, o.maxStep
	if least == 0 {
		least = DefaultMinStep
	}
	if most == 0 {
		most = DefaultMaxStep
	}
	most = max(most, least)
	ctx, stop := context.WithCancel(context.Background())
	return &Segments{
		blocks: blocks, prefix: prefix, now: o.now,
		minStep: least, maxStep: most, step: least,
		bgCtx: ctx, stop: stop,
	}
}

// Close cancels a reservation running ahead of need and waits for it.
func (g *Segments) Close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.stop()
	g.bg.Wait()
}

// NextString returns Next in its string form.
func (g *Segments) NextString(ctx context.Context) (string, error) {
	id, err := g.Next(ctx)
	if err != nil {
		return "", err
	}
	return id.String(), nil
}

// Next returns a new ID: from the block in hand, else the one reserved
// ahead, else one reserved now (the first draw, a draw outrunning the
// reservation ahead, a database out longer than half a block).
func (g *Segments) Next(ctx context.Context) (ID, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for tries := 0; ; {
		// Read under the lock, so that one process's IDs increase in the
		// order drawn.
		now := g.now()
		secs, err := ticks(now.Sub(epoch), time.Second, timeBits)
		if err != nil {
			return 0, fmt.Errorf("%w: %v", err, now)
		}
		day := dayOf(secs)
		if (g.cur.day != day || g.cur.left() == 0) && g.next.day == day && g.next.left() > 0 {
			g.cur, g.next = g.next, segment{}
		}
		if g.cur.day == day && g.cur.left() > 0 {
			g.cur.last++
			g.ahead(now, secs)
			return Compose(secs, uint32(g.cur.last)), nil
		}
		if g.fetching != nil {
			if err := g.await(ctx); err != nil {
				return 0, err
			}
			continue
		}
		if tries == maxRefills {
			return 0, fmt.Errorf("drawing from %s: no block of sequence numbers after %d reservations", g.key(day), tries)
		}
		tries++
		seg, err := g.reserve(ctx, day, now)
		if err != nil {
			return 0, err
		}
		g.cur = seg
	}
}

// await waits, the lock let go, for the reservation running to end.
func (g *Segments) await(ctx context.Context) error {
	done := g.fetching
	g.mu.Unlock()
	defer g.mu.Lock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for a block of order ids: %w", ctx.Err())
	}
}

// dayOf numbers the day secs (since the epoch) falls in, from 1.
func dayOf(secs int64) int64 { return secs/(24*60*60) + 1 }

// key names a day's row in Blocks: Redis's day key (see dayKey).
func (g *Segments) key(day int64) string {
	return dayKey(g.prefix, time.Unix(EpochUnix+(day-1)*24*60*60, 0))
}

// reserve reserves a block of day's numbers, the lock let go meanwhile and
// every other reservation kept waiting.
func (g *Segments) reserve(ctx context.Context, day int64, now time.Time) (segment, error) {
	size, done := g.begin(now)
	g.mu.Unlock()
	from, to, err := g.blocks.Reserve(ctx, g.key(day), 0, size)
	g.mu.Lock()
	return g.end(done, day, size, from, to, err)
}

// begin marks a reservation running and sizes its block; the lock is held.
func (g *Segments) begin(now time.Time) (uint32, chan struct{}) {
	done := make(chan struct{})
	g.fetching = done
	return g.sizeStep(now), done
}

// end marks the reservation begun with done over, and returns its block;
// the lock is held.
func (g *Segments) end(done chan struct{}, day int64, size uint32, from, to uint64, err error) (segment, error) {
	g.fetching = nil
	close(done)
	switch {
	case err != nil:
		return segment{}, err
	case from >= math.MaxUint32:
		return segment{}, fmt.Errorf("%w: %s reached %d", ErrSeqOverflow, g.key(day), from)
	}
	return segment{day: day, last: from, to: min(to, math.MaxUint32), size: uint64(size)}, nil
}

// sizeStep returns the size of the block reserved now: the last one's,
// doubled or halved by how long ago the last reservation began, about the
// life of a block since each is reserved when half the one before is used.
func (g *Segments) sizeStep(now time.Time) uint32 {
	if !g.reservedAt.IsZero() {
		switch lasted := now.Sub(g.reservedAt); {
		case lasted < growUnder:
			g.step = uint32(min(uint64(g.step)*2, uint64(g.maxStep)))
		case lasted > shrinkOver:
			g.step = max(g.step/2, g.minStep)
		}
	}
	g.reservedAt = now
	return g.step
}

// ahead starts the reservation of the next block in the background, unless
// one runs or the next block is in hand already: the current day's once
// half the block in hand is used, the next day's within dayAhead of
// midnight.
func (g *Segments) ahead(now time.Time, secs int64) {
	if g.fetching != nil || g.closed || now.Before(g.retryAt) {
		return
	}
	day := dayOf(secs + int64(dayAhead/time.Second))
	if day == g.cur.day && g.cur.left() > g.cur.size/2 {
		return
	}
	if g.next.day == day && g.next.left() > 0 {
		return
	}
	size, done := g.begin(now)
	g.bg.Go(func() {
		ctx, cancel := context.WithTimeout(g.bgCtx, aheadTimeout)
		defer cancel()
		from, to, err := g.blocks.Reserve(ctx, g.key(day), 0, size)
		g.mu.Lock()
		defer g.mu.Unlock()
		seg, err := g.end(done, day, size, from, to, err)
		if err != nil {
			g.retryAt = g.now().Add(aheadRetry)
			return
		}
		g.next = seg
	})
}
