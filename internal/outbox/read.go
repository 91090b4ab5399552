package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/stock"
)

// Read delivers up to count new orders per stream to consumer, waiting up
// to block for one. Malformed entries come back in bad. On a cluster, a
// stream whose node fails does not stop the others: what they delivered
// comes back beside the error, and the caller must handle it, or it stays
// delivered and unacknowledged until a claim. On a cluster, too, Read
// leaves blocking reads in flight for the consumer's next Read (readEach);
// a consumer that stops calls StopReading.
func (qu *RedisStreams) Read(ctx context.Context, consumer string, streams []string, count int64, block time.Duration) (good []QueuedOrder, bad []QueuedOrder, err error) {
	if len(streams) == 0 {
		return nil, nil, nil
	}
	if qu.split {
		return qu.readEach(ctx, consumer, streams, count, block)
	}
	args := append(append([]string{}, streams...), make([]string, len(streams))...)
	for i := range streams {
		args[len(streams)+i] = ">"
	}
	res, err := qu.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: stock.Group, Consumer: consumer, Streams: args, Count: count, Block: block}).Result()
	if errors.Is(err, redis.Nil) || errStreamGone(err) {
		return nil, nil, nil
	}
	if errNoGroup(err) {
		// A stream in the registry without its group: dropped while
		// registered. Forget those, and read the others next time.
		return nil, nil, qu.forgetMissing(ctx, streams)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading the order streams: %w", err)
	}
	for _, st := range res {
		good, bad = collect(st.Stream, st.Messages, good, bad)
	}
	return good, bad, nil
}

// readPoll is how often the streams a cluster's Read cannot block on (past
// maxBlocking, or on a server without CLIENT ID) are looked at while none
// holds a new order.
const readPoll = 20 * time.Millisecond

// readEach is Read on a Redis Cluster, where one XREADGROUP may not name
// streams in different slots. The replies of the reads left in flight
// first; else one XREADGROUP per stream that has none, without BLOCK, in
// one pipeline (a round trip per node); else one XREADGROUP ... BLOCK per
// stream, each on a connection of its own, all in flight at once (the
// consumer's reader), so that an order is delivered as soon as it is
// added, with no poll. The Read returns when one delivers; the others stay
// in flight, and what they deliver later is the next Read's (see reader).
func (qu *RedisStreams) readEach(ctx context.Context, consumer string, streams []string, count int64, block time.Duration) (good, bad []QueuedOrder, err error) {
	rd := qu.reader(consumer)
	rd.mu.Lock()
	defer rd.mu.Unlock()
	var got readings
	want := setOf(streams)
	rd.launch(ctx, qu, consumer, rd.landed(ctx, qu, &got, consumer, want), count, block)
	// The streams without a read in flight are read at once, in one
	// pipeline: what they hold comes back in one batch.
	if idle := rd.idle(streams); !got.any() && len(idle) > 0 {
		qu.readNow(ctx, &got, consumer, idle, count)
	}
	// BLOCK is in milliseconds, and BLOCK 0 waits for ever.
	if !got.any() && block >= time.Millisecond {
		rd.wait(ctx, qu, &got, consumer, streams, count, block)
	}
	return got.result(ctx, qu)
}

// readNow reads every stream once, without BLOCK: one XREADGROUP per
// stream in one pipeline.
func (qu *RedisStreams) readNow(ctx context.Context, r *readings, consumer string, streams []string, count int64) {
	cmds := make([]*redis.XStreamSliceCmd, len(streams))
	_, err := qu.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, st := range streams {
			cmds[i] = pipe.XReadGroup(ctx, readArgs(consumer, st, count, -1))
		}
		return nil
	})
	// Every reply is collected before any failure is reported: the
	// streams of the nodes that answered delivered their orders.
	for i, c := range cmds {
		r.add(streams[i], c.Val(), c.Err())
	}
	if err != nil && !errors.Is(err, redis.Nil) && !r.any() {
		r.failed = append(r.failed, fmt.Errorf("reading the order streams: %w", err))
	}
}

func readArgs(consumer, stream string, count int64, block time.Duration) *redis.XReadGroupArgs {
	return &redis.XReadGroupArgs{Group: stock.Group, Consumer: consumer, Streams: []string{stream, ">"}, Count: count, Block: block}
}

// readings gathers what the reads of one Read delivered, and how they
// failed.
type readings struct {
	good, bad []QueuedOrder
	missing   []string // streams without their group (NOGROUP)
	failed    []error
}

// errStreamGone matches the error a blocked XREADGROUP answers when its
// stream is deleted meanwhile (Redis 7): closed as drained, and dropped
// from the registry by its closer; nothing was delivered.
func errStreamGone(err error) bool { return redis.HasErrorPrefix(err, "UNBLOCKED") }

// add takes one XREADGROUP's reply. A redirection is no failure: the
// reader reads that stream again through the cluster client, which
// follows it.
func (r *readings) add(stream string, res []redis.XStream, err error) {
	_, moved := redis.IsMovedError(err)
	_, ask := redis.IsAskError(err)
	switch {
	case errNoGroup(err):
		r.missing = append(r.missing, stream)
	case err != nil && !errors.Is(err, redis.Nil) && !errStreamGone(err) && !moved && !ask:
		r.failed = append(r.failed, fmt.Errorf("reading order stream %s: %w", stream, err))
	}
	for _, st := range res {
		r.good, r.bad = collect(st.Stream, st.Messages, r.good, r.bad)
	}
}

func (r *readings) merge(o readings) {
	r.good, r.bad = append(r.good, o.good...), append(r.bad, o.bad...)
	r.missing, r.failed = append(r.missing, o.missing...), append(r.failed, o.failed...)
}

// any reports whether Read has something to return: orders, a failure, or
// streams to forget.
func (r *readings) any() bool {
	return len(r.good)+len(r.bad)+len(r.missing)+len(r.failed) > 0
}

// result is Read's answer: the orders delivered, beside the failures.
func (r *readings) result(ctx context.Context, qu *RedisStreams) (good, bad []QueuedOrder, err error) {
	if len(r.failed) > 0 {
		return r.good, r.bad, errors.Join(r.failed...)
	}
	if len(r.missing) > 0 {
		return r.good, r.bad, qu.forgetMissing(ctx, r.missing)
	}
	return r.good, r.bad, nil
}

// poll reads streams without BLOCK every readPoll until one delivers, stop
// closes, or deadline passes.
func (qu *RedisStreams) poll(ctx context.Context, stop <-chan struct{}, consumer string, streams []string, count int64, deadline time.Time) readings {
	var r readings
	for time.Now().Before(deadline) {
		t := time.NewTimer(readPoll)
		select {
		case <-stop:
			t.Stop()
			return r
		case <-ctx.Done():
			t.Stop()
			return r
		case <-t.C:
		}
		if qu.readNow(ctx, &r, consumer, streams, count); r.any() {
			return r
		}
	}
	return r
}

func collect(stream string, msgs []redis.XMessage, good, bad []QueuedOrder) ([]QueuedOrder, []QueuedOrder) {
	for _, m := range msgs {
		q, err := parseQueued(stream, m)
		if err != nil {
			bad = append(bad, q)
			continue
		}
		good = append(good, q)
	}
	return good, bad
}
