package stock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/idgen"
)

// The queue of the async mode: every async take appends its order to its
// shard's stream (async.lua), in the script that takes the unit, and marks
// it in the pending index; the streams' registry is written by the takes
// too (registry.go). What is here is that state as stock keeps it: the
// registry listed, the pending index, the backlog, the dead letters
// counted. Reading the streams, claiming, acknowledging and the dead
// letters are internal/outbox's (RedisStreams), through Reading.

// Reading is what internal/outbox reads, claims, acknowledges and parks
// the queue's orders with: the client, the registry the takes enrol the
// streams in and its set before generations, and the sold-out flags a
// dead letter's unit clears.
type Reading struct {
	Client                redis.Cmdable
	Split                 bool // a cluster client: no command spans slots
	Registry, OldRegistry string
	Flags                 *Flags
}

// Reading is the queue as internal/outbox reads it.
func (qu *Queue) Reading() Reading {
	return Reading{Client: qu.rdb, Split: qu.split, Registry: qu.streams, OldRegistry: qu.oldStreams, Flags: qu.flags}
}

// ForgetTake deletes the buyer's record of the take of order, as a
// give-back does: a dead letter on a cluster, whose buyer key is in a
// slot of its own.
func (qu *Queue) ForgetTake(ctx context.Context, l Layout, user int64, order idgen.ID) error {
	return forget(ctx, qu.rdb, Product{Layout: l}, user, "", order.String())
}

// ParseStreamKey reads product, shard and epoch back from a stream key,
// seckill:orders:{P_k}:E (StreamKey).
func ParseStreamKey(key string) (Layout, int, error) {
	rest, ok := strings.CutPrefix(key, "seckill:orders:{")
	tag, epoch, ok2 := strings.Cut(rest, "}:")
	p, k, ok3 := strings.Cut(tag, "_")
	if !ok || !ok2 || !ok3 {
		return Layout{}, 0, fmt.Errorf("%q is not an order stream", key)
	}
	id, err1 := strconv.ParseInt(p, 10, 64)
	shard, err2 := strconv.Atoi(k)
	e, err3 := strconv.ParseInt(epoch, 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return Layout{}, 0, fmt.Errorf("order stream %q: %w", key, err)
	}
	return Layout{ID: id, Epoch: e}, shard, nil
}

// Streams lists the streams that may hold queued orders.
func (qu *Queue) Streams(ctx context.Context) ([]string, error) {
	keys, err := registered(ctx, qu.rdb, qu.streams)
	if err != nil {
		return nil, fmt.Errorf("listing the order streams: %w", err)
	}
	return keys, nil
}

// errNoGroup matches the error XPENDING answers for a stream that was
// deleted (or never created) under the registry's feet.
func errNoGroup(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOGROUP") }

// Pending is an order in the pending index: queued by the async mode's
// take, or refused by the database (Failed says why; Shard and Sale are
// then unknown) and not settled yet.
type Pending struct {
	Product, User, Sale int64
	Shard               int
	Failed              string
}

// PendingIndex is the pending index an order of shard of l is queued in:
// the day's on one Redis, the shard's on a cluster.
func (qu *Queue) PendingIndex(l Layout, shard int, id idgen.ID) string {
	if qu.split {
		return l.ShardPendingKey(shard)
	}
	return PendingKey(id.Time())
}

// Pending looks an order up in the pending index. On a Redis Cluster the
// queued are indexed by shard, and the order id does not name its shard:
// the lookup asks the pending index of every registered stream, and the
// day's, where the failed are, in one pipeline (a round trip per node).
func (qu *Queue) Pending(ctx context.Context, id idgen.ID) (Pending, bool, error) {
	keys := []string{PendingKey(id.Time())}
	if qu.split {
		streams, err := qu.Streams(ctx)
		if err != nil {
			return Pending{}, false, err
		}
		for _, st := range streams {
			if l, shard, err := ParseStreamKey(st); err == nil {
				keys = append(keys, l.ShardPendingKey(shard))
			}
		}
	}
	cmds := make([]*redis.StringCmd, len(keys))
	_, err := qu.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = pipe.HGet(ctx, k, id.String())
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return Pending{}, false, fmt.Errorf("looking order %s up among the queued: %w", id, err)
	}
	for _, c := range cmds {
		if v, err := c.Result(); err == nil {
			p, err := parsePending(id, v)
			return p, err == nil, err
		}
	}
	return Pending{}, false, nil
}

// parsePending reads a pending index's entry: "product shard user sale"
// (async.lua), or "failed @product:user reason" (outbox.RedisStreams.DeadLetter).
func parsePending(id idgen.ID, v string) (Pending, error) {
	if reason, failed := strings.CutPrefix(v, "failed "); failed {
		// An entry from before the product and buyer were kept is the
		// reason alone, of no product nor buyer.
		var p Pending
		if n, _ := fmt.Sscanf(reason, "@%d:%d ", &p.Product, &p.User); n == 2 {
			_, reason, _ = strings.Cut(reason, " ")
		} else {
			p.Product, p.User = 0, 0
		}
		p.Failed = reason
		return p, nil
	}
	var p Pending
	if _, err := fmt.Sscan(v, &p.Product, &p.Shard, &p.User, &p.Sale); err != nil {
		return Pending{}, fmt.Errorf("queued order %s: %q: %w", id, v, err)
	}
	return p, nil
}

// pendingChunk bounds the lookups of one pipeline.
const pendingChunk = 1000

// PendingAmong reports which of the takes of l's shards are in the pending
// index, in pipelines.
func (qu *Queue) PendingAmong(ctx context.Context, l Layout, takes []Entry) (map[idgen.ID]bool, error) {
	out := make(map[idgen.ID]bool)
	for len(takes) > 0 {
		chunk := takes[:min(pendingChunk, len(takes))]
		takes = takes[len(chunk):]
		cmds := make([]*redis.BoolCmd, len(chunk))
		var days []*redis.BoolCmd // on a cluster, the day's index too
		_, err := qu.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for i, e := range chunk {
				cmds[i] = pipe.HExists(ctx, qu.PendingIndex(l, e.Shard, e.Order), e.Order.String())
				if qu.split {
					// An order queued by an earlier version, which indexed
					// a cluster's orders by day too.
					days = append(days, pipe.HExists(ctx, PendingKey(e.Order.Time()), e.Order.String()))
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("looking %d orders up among the queued: %w", len(chunk), err)
		}
		for i, c := range cmds {
			if c.Val() || days != nil && days[i].Val() {
				out[chunk[i].Order] = true
			}
		}
	}
	return out, nil
}

// Backlog is the queue's state over every registered stream.
type Backlog struct {
	Streams int
	// Queued is the orders in the streams: not delivered yet, or delivered
	// and not acknowledged.
	Queued int64
	// Delivered is those of Queued delivered to a consumer and not
	// acknowledged: being written, or held by a consumer that died.
	Delivered int64
	// Oldest is the age of the oldest order queued; 0 when none is.
	Oldest time.Duration
}

// Backlog reads the queue's state: two commands per stream.
func (qu *Queue) Backlog(ctx context.Context) (Backlog, error) {
	streams, err := qu.Streams(ctx)
	if err != nil {
		return Backlog{}, err
	}
	type cmds struct {
		first *redis.XMessageSliceCmd
		len   *redis.IntCmd
		pend  *redis.XPendingCmd
	}
	cs := make([]cmds, len(streams))
	_, err = qu.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, st := range streams {
			cs[i] = cmds{pipe.XRangeN(ctx, st, "-", "+", 1), pipe.XLen(ctx, st), pipe.XPending(ctx, st, Group)}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) && !errNoGroup(err) {
		return Backlog{}, fmt.Errorf("reading the queue's backlog: %w", err)
	}
	b := Backlog{Streams: len(streams)}
	now := time.Now()
	for _, c := range cs {
		b.Queued += c.len.Val()
		if p := c.pend.Val(); p != nil {
			b.Delivered += p.Count
		}
		if msgs := c.first.Val(); len(msgs) > 0 {
			ms, _ := strconv.ParseInt(strings.Split(msgs[0].ID, "-")[0], 10, 64)
			b.Oldest = max(b.Oldest, now.Sub(time.UnixMilli(ms)))
		}
	}
	return b, nil
}

// DeliveredTo counts, per consumer name, the orders delivered to it and
// not acknowledged yet, over every registered stream: one XPENDING each.
func (qu *Queue) DeliveredTo(ctx context.Context) (map[string]int64, error) {
	streams, err := qu.Streams(ctx)
	if err != nil {
		return nil, err
	}
	held := make(map[string]int64)
	for _, st := range streams {
		p, err := qu.rdb.XPending(ctx, st, Group).Result()
		if errNoGroup(err) || errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading the orders delivered from %s: %w", st, err)
		}
		for name, n := range p.Consumers {
			held[name] += n
		}
	}
	return held, nil
}

// DeadCountField is DeadCountKey's field of a product's sale.
func DeadCountField(product, sale int64) string {
	return strconv.FormatInt(product, 10) + ":" + strconv.FormatInt(sale, 10)
}

// DeadLettered counts the orders of a product's sale that went to the dead
// letters: answered 202, refused by the database, their units back on sale.
func (qu *Queue) DeadLettered(ctx context.Context, product, sale int64) (int, error) {
	n, err := qu.rdb.HGet(ctx, DeadCountKey, DeadCountField(product, sale)).Int()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("counting the dead letters of product %d: %w", product, err)
	}
	return n, nil
}
