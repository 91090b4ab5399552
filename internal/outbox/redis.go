package outbox

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/stock"
)

// The Redis side of the async mode's outbox: every async take appends its
// order to its shard's stream in the script that takes the unit (stock's
// async.lua: the enqueue stays with the take, or the take and its entry
// would no longer be one atomic step), and enrols the stream in the
// registry. Here the consumers read the streams in one group, claim what a
// dead consumer held, acknowledge what they wrote, park what the database
// refused, and close the streams drained.

var (
	//go:embed dead_letter.lua
	deadLetterLua    string
	deadLetterScript = redis.NewScript(deadLetterLua)

	//go:embed close_stream.lua
	closeStreamLua    string
	closeStreamScript = redis.NewScript(closeStreamLua)
)

// RedisStreams reads, claims, acknowledges and dead-letters the orders of
// a stock.Queue's streams. One per process, shared by its consumers: it
// keeps, on a cluster, the connections of the blocking reads between two
// reads, and each consumer's reads in flight.
type RedisStreams struct {
	q     *stock.Queue
	rdb   redis.Cmdable
	split bool
	// streams is the registry of order streams the takes enrol in
	// (stock.StreamsKey); oldStreams is its set before generations
	// (stock.OldStreamsKey), adopted once (AdoptOldRegistry).
	streams, oldStreams string
	// drainIdle is how long a drained stream stays open on a cluster
	// (DrainIdle).
	drainIdle time.Duration
	// flags are cleared when a dead letter's unit goes back.
	flags *stock.Flags
	// blockers are the connections of the blocking reads on a cluster,
	// kept between two reads; readers are each consumer's reads in flight
	// there.
	blockers  blockers
	readersMu sync.Mutex
	readers   map[string]*reader
}

// NewRedisStreams returns the reader of q's streams.
func NewRedisStreams(q *stock.Queue) *RedisStreams {
	r := q.Reading()
	return &RedisStreams{q: q, rdb: r.Client, split: r.Split, streams: r.Registry, oldStreams: r.OldRegistry,
		drainIdle: DefaultDrainIdle, flags: r.Flags}
}

// Streams lists the streams that may hold queued orders (stock's registry).
func (qu *RedisStreams) Streams(ctx context.Context) ([]string, error) { return qu.q.Streams(ctx) }

// errNoGroup matches the error XREADGROUP answers for a stream that was
// deleted (or never created) under the registry's feet.
func errNoGroup(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOGROUP") }

// forgetMissing closes the streams a read found without their group:
// dropped while enrolled (a purge, or a writer that enrolled one and died
// before opening it).
func (qu *RedisStreams) forgetMissing(ctx context.Context, streams []string) error {
	for _, st := range streams {
		if _, err := qu.close(ctx, st, 0); err != nil {
			return err
		}
	}
	return nil
}

// Claim takes over, for consumer, up to count orders of a stream that were
// delivered to a consumer and left unacknowledged for at least minIdle:
// that consumer died or stalls. XAUTOCLAIM hands each to one claimer only.
func (qu *RedisStreams) Claim(ctx context.Context, consumer, stream string, minIdle time.Duration, count int64) (good, bad []QueuedOrder, err error) {
	msgs, _, err := qu.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
		Stream: stream, Group: stock.Group, Consumer: consumer, MinIdle: minIdle, Start: "0-0", Count: count,
	}).Result()
	if errNoGroup(err) || errors.Is(err, redis.Nil) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("claiming from %s: %w", stream, err)
	}
	good, bad = collect(stream, msgs, nil, nil)
	return good, bad, nil
}

// Ack removes written orders from their streams and from the pending index.
func (qu *RedisStreams) Ack(ctx context.Context, qs []QueuedOrder) error {
	_, err := qu.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, q := range qs {
			pipe.XAck(ctx, q.Stream, stock.Group, q.MsgID)
			pipe.XDel(ctx, q.Stream, q.MsgID)
			if q.Order != 0 {
				pipe.HDel(ctx, qu.q.PendingIndex(q.Layout, q.Shard, q.Order), q.Order.String())
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("acknowledging %d orders: %w", len(qs), err)
	}
	return nil
}

// DeadLetter parks an order the database refused (see dead_letter.lua).
func (qu *RedisStreams) DeadLetter(ctx context.Context, q QueuedOrder, reason string) error {
	var fields strings.Builder
	for k, v := range q.Fields {
		fmt.Fprintf(&fields, "%s\t%v\t", k, v)
	}
	l := q.Layout
	reason = strings.ReplaceAll(reason, "\t", " ")
	keys := []string{q.Stream, l.StockKey(q.Shard), l.LedgerKey(q.Shard)}
	// The pending index keeps whose order failed, and of which product:
	// reading it is its buyer's alone on a product that is not a lab one.
	failed := fmt.Sprintf("failed @%d:%d %s", l.ID, q.User, reason)
	if qu.split {
		// On a cluster, in steps: the dead letter and the failure first,
		// so that a crash after them leaves the order to be parked again
		// (twice in the dead letters), not lost, and its buyer reading
		// why (Pending reads the day's index first); the buyer after.
		var vals []any
		for k, v := range q.Fields {
			vals = append(vals, k, v)
		}
		if err := qu.rdb.XAdd(ctx, &redis.XAddArgs{Stream: stock.DeadLetterKey, Values: append(vals, "reason", reason)}).Err(); err != nil {
			return fmt.Errorf("parking order %s in the dead letters: %w", q.Order, err)
		}
		if err := qu.rdb.HSet(ctx, stock.PendingKey(q.Order.Time()), q.Order.String(), failed).Err(); err != nil {
			return fmt.Errorf("marking dead order %s failed: %w", q.Order, err)
		}
	} else {
		keys = append(keys, stock.DeadLetterKey, l.BuyerKey(q.User), stock.PendingKey(q.Order.Time()), stock.DeadCountKey)
	}
	err := deadLetterScript.Run(ctx, qu.rdb, keys, stock.Group, q.MsgID, q.Order.String(), q.User, reason, fields.String(),
		stock.DeadCountField(l.ID, q.Sale), failed).Err()
	if err != nil {
		return fmt.Errorf("parking order %s in the dead letters: %w", q.Order, err)
	}
	if qu.split {
		if err := qu.q.ForgetTake(ctx, l, q.User, q.Order); err != nil {
			return err
		}
		// Failed, no longer queued; a failure leaves the entry to go with
		// its stream's close (Pending reads the failed first).
		_ = qu.rdb.HDel(ctx, l.ShardPendingKey(q.Shard), q.Order.String()).Err()
		if err := qu.rdb.HIncrBy(ctx, stock.DeadCountKey, stock.DeadCountField(l.ID, q.Sale), 1).Err(); err != nil {
			return fmt.Errorf("counting dead order %s: %w", q.Order, err)
		}
	}
	qu.flags.Clear(l.ID)
	return nil
}

// ForgetDrained closes the registered streams that hold no order, and, on
// a Redis Cluster, took none for DrainIdle; the next async take on one
// opens it again. It returns how many it closed.
func (qu *RedisStreams) ForgetDrained(ctx context.Context) (int, error) {
	streams, err := qu.Streams(ctx)
	if err != nil {
		return 0, err
	}
	idle := time.Duration(0)
	if qu.split {
		idle = qu.drainIdle
	}
	n := 0
	for _, st := range streams {
		closed, err := qu.close(ctx, st, idle)
		if err != nil {
			return n, err
		}
		if closed {
			n++
		}
	}
	return n, nil
}

// DefaultDrainIdle is how long, on a Redis Cluster, a drained stream must
// have taken no order before ForgetDrained closes it: a take that finds
// its stream closed costs two more round trips (stock's registry.go), which a
// stream drained between two orders of a running sale should not. On one
// Redis there is no such cost, and an empty stream closes at once.
const DefaultDrainIdle = 30 * time.Second

// DrainIdle sets how long a drained stream stays open on a Redis Cluster
// (DefaultDrainIdle); 0 closes it as soon as it is empty.
func (qu *RedisStreams) DrainIdle(d time.Duration) *RedisStreams {
	qu.drainIdle = max(d, 0)
	return qu
}

// close closes stream if it holds no order (close_stream.lua), and, on a
// cluster, then drops it from the registry at the generation the close
// gave. It reports whether the stream left the registry.
func (qu *RedisStreams) close(ctx context.Context, stream string, idle time.Duration) (bool, error) {
	if !qu.split {
		n, err := closeStreamScript.Run(ctx, qu.rdb, []string{stream, qu.streams}, idle.Milliseconds()).Int()
		if err != nil {
			return false, fmt.Errorf("closing drained stream %s: %w", stream, err)
		}
		return n == 1, nil
	}
	l, shard, err := stock.ParseStreamKey(stream)
	if err != nil {
		// Not an order stream: nothing of it to close, only the entry.
		return true, qu.rdb.HDel(ctx, qu.streams, stream).Err()
	}
	gen, err := closeStreamScript.Run(ctx, qu.rdb, []string{stream, l.ShardPendingKey(shard), stock.GenerationKey(stream)}, idle.Milliseconds()).Int64()
	if err != nil {
		return false, fmt.Errorf("closing drained stream %s: %w", stream, err)
	}
	if gen == 0 {
		return false, nil
	}
	return stock.Unenrol(ctx, qu.rdb, qu.streams, stream, gen)
}

// AdoptOldRegistry moves the streams listed in the registry of an earlier
// version (stock.OldStreamsKey, a set) into the registry, each at its current
// generation, then drops the old set: a stream it listed may hold orders
// that no take will enrol again (a sold-out sale). A consumer calls it
// once when it starts.
func (qu *RedisStreams) AdoptOldRegistry(ctx context.Context) error {
	old, err := qu.rdb.SMembers(ctx, qu.oldStreams).Result()
	if err != nil || len(old) == 0 {
		return nil // none, or a key of another type: nothing of ours
	}
	if err := qu.q.EnrolStreams(ctx, old); err != nil {
		return err
	}
	if err := qu.rdb.Del(ctx, qu.oldStreams).Err(); err != nil {
		return fmt.Errorf("dropping the old registry %s: %w", qu.oldStreams, err)
	}
	return nil
}
