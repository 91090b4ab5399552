package outbox

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// UniqueName is a consumer name no other process takes: host, pid and a
// random suffix, so that a consumer's pending orders name their process.
func UniqueName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), rand.Text()[:6])
}

// streams is the async mode's queue: the Redis Streams of RedisStreams, one
// per shard, read in one consumer group. Orders delivered to a consumer
// that died are claimed by the living after Options.ClaimIdle. A refused
// or malformed entry goes to the dead letters, its unit back to the store.
type streams struct {
	q        *RedisStreams
	name     string
	opt      Options
	returned func(ctx context.Context, product int64)
	log      *slog.Logger

	mu     sync.Mutex
	list   []string
	listed time.Time
	// lastClaim, claimedLast and adopted are the loop's alone.
	lastClaim   time.Time
	adopted     bool
	claimedLast bool
}

// NewStreams returns the Source of q's streams for the consumer name.
// returned is told of each product a unit came back to (a dead letter):
// the other processes' sold-out flags must go.
func NewStreams(q *RedisStreams, name string, returned func(ctx context.Context, product int64), opt Options) Source {
	opt = opt.withDefaults()
	return &streams{q: q, name: name, opt: opt, returned: returned, log: opt.Log, lastClaim: time.Now()}
}

func (s *streams) Next(ctx context.Context, stop <-chan struct{}) (Batch, error) {
	if !s.adopted {
		// Streams an earlier version listed, with their orders.
		if err := s.q.AdoptOldRegistry(ctx); err != nil {
			s.log.Warn("the consumer cannot adopt the old registry of streams", "error", err)
		} else {
			s.adopted = true
		}
	}
	// A claim takes a turn of its own, never two in a row: however long
	// the claimed orders take to write, the new ones are read in between.
	if !s.claimedLast && time.Since(s.lastClaim) >= s.opt.ClaimEvery {
		s.lastClaim, s.claimedLast = time.Now(), true
		return s.claim(ctx), nil
	}
	s.claimedLast = false
	list, err := s.streamList(ctx)
	if err != nil {
		return Batch{}, fmt.Errorf("listing the order streams: %w", err)
	}
	if len(list) == 0 {
		wait(stop, s.opt.Block)
		return Batch{}, nil
	}
	good, bad, err := s.q.Read(ctx, s.name, list, s.opt.Batch, s.opt.Block)
	if len(good)+len(bad) == 0 && err == nil {
		s.stale()
	}
	s.malformed(ctx, bad)
	// Delivered to this consumer even when another stream's node failed:
	// written now, or they would wait for the claim.
	return Batch{Orders: good}, err
}

// streamList returns the registered streams, read again every second, and
// after a read that found nothing (stale).
func (s *streams) streamList(ctx context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.listed) < time.Second && s.list != nil {
		return s.list, nil
	}
	list, err := s.q.Streams(ctx)
	if err != nil {
		return nil, err
	}
	s.list, s.listed = list, time.Now()
	return list, nil
}

// claim takes over the orders left with consumers that died, and drops the
// streams that hold none.
func (s *streams) claim(ctx context.Context) Batch {
	list, err := s.streamList(ctx)
	if err != nil {
		return Batch{}
	}
	var b Batch
	for _, st := range list {
		good, bad, err := s.q.Claim(ctx, s.name, st, s.opt.ClaimIdle, s.opt.Batch)
		if err != nil {
			s.log.Warn("the consumer cannot claim orders", "stream", st, "error", err)
			continue
		}
		if len(good)+len(bad) > 0 {
			s.log.Warn("claimed orders left by another consumer", "stream", st, "orders", len(good)+len(bad))
		}
		s.malformed(ctx, bad)
		b.Orders = append(b.Orders, good...)
	}
	if _, err := s.q.ForgetDrained(ctx); err != nil {
		s.log.Warn("the consumer cannot drop drained streams", "error", err)
	}
	s.stale()
	return b
}

// stale has the next read list the streams again. After a read that found
// nothing, so that a stream registered meanwhile (a product's first async
// order on a shard) is read at the next turn, not up to a second later: at
// most one listing per Options.Block while idle, none while orders flow.
func (s *streams) stale() {
	s.mu.Lock()
	s.listed = time.Time{}
	s.mu.Unlock()
}

func (s *streams) Refuse(ctx context.Context, r Refusal) {
	s.deadLetter(ctx, []QueuedOrder{r.Order}, r.Reason)
}

// malformed parks entries that are not orders in the dead letters.
func (s *streams) malformed(ctx context.Context, bad []QueuedOrder) {
	for _, q := range bad {
		s.log.Error("a malformed queued order goes to the dead letters, its unit back on sale", "stream", q.Stream, "entry", q.MsgID)
	}
	s.deadLetter(ctx, bad, "malformed message")
}

// deadLetter parks qs in the dead letters, their units back in the store;
// one it cannot park stays delivered, and is claimed again later.
func (s *streams) deadLetter(ctx context.Context, qs []QueuedOrder, reason string) {
	for _, q := range qs {
		if err := s.q.DeadLetter(ctx, q, reason); err != nil {
			s.log.Error("parking an order in the dead letters", "order", q.Order, "stream", q.Stream, "reason", reason, "error", err)
			continue
		}
		s.returned(ctx, q.Layout.ID)
	}
}

// Ack acknowledges the written and voided; the refused left their streams
// as dead letters.
func (s *streams) Ack(ctx context.Context, _ Batch, w Outcome) error {
	return s.q.Ack(ctx, append(w.Written, w.Voided...))
}

// Close ends the reads the consumer keeps in flight on a cluster. An order
// one delivered meanwhile is held as an unwritten batch is: another
// consumer claims it after ClaimIdle.
func (s *streams) Close() error {
	good, bad, err := s.q.StopReading(context.Background(), s.name)
	if n := len(good) + len(bad); n > 0 {
		s.log.Warn("orders delivered as the consumer stopped; another consumer claims them", "orders", n, "after", s.opt.ClaimIdle)
	}
	if err != nil {
		return fmt.Errorf("ending the consumer's reads: %w", err)
	}
	return nil
}

// wait sleeps for d, or until stop closes.
func wait(stop <-chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-stop:
	case <-t.C:
	}
}
