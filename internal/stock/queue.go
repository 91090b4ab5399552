package stock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/api"
	"seckill/internal/idgen"
)

// The queue of the async mode: every async take appends its order to its
// shard's stream (async.lua), and consumers read the streams in one group,
// write the orders, and acknowledge them. These are the consumers' side of
// it; internal/order's Consumer drives them.

var (
	//go:embed dead_letter.lua
	deadLetterLua    string
	deadLetterScript = redis.NewScript(deadLetterLua)

	//go:embed close_stream.lua
	closeStreamLua    string
	closeStreamScript = redis.NewScript(closeStreamLua)
)

// QueuedOrder is one order read from a stream.
type QueuedOrder struct {
	Stream string // the stream it came from
	MsgID  string // its entry id there
	Layout Layout // of the shard it was taken from (Shards unknown: 0)
	Shard  int
	Order  idgen.ID
	Sale   int64
	User   int64
	Key    string
	At     time.Time  // when it was taken, to the millisecond
	Due    *time.Time // when its payment window ends, if its product has one
	Fields map[string]any
	// Mode is the name of the mode that took it: api.ModeAsync, or
	// api.ModeMQ for an order that came through the broker (then Stream and
	// MsgID are empty).
	Mode string
	// Trace is the W3C traceparent of the purchase's span that queued it
	// (the stream entry's field "trace", the message's header
	// "traceparent"); "" when the purchase was not traced.
	Trace string
}

// parseStream reads product, shard and epoch back from a stream key,
// seckill:orders:{P_k}:E.
func parseStream(key string) (Layout, int, error) {
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

// parseQueued reads one stream entry. A malformed entry is returned with
// the error, so that it can go to the dead letters.
func parseQueued(stream string, m redis.XMessage) (QueuedOrder, error) {
	q := QueuedOrder{Stream: stream, MsgID: m.ID, Fields: m.Values, Mode: api.ModeAsync}
	l, shard, err := parseStream(stream)
	if err != nil {
		return q, err
	}
	q.Layout, q.Shard = l, shard
	field := func(name string) string { s, _ := m.Values[name].(string); return s }
	id, err := idgen.ParseID(field("id"))
	q.Order = id
	sale, err1 := strconv.ParseInt(field("sale"), 10, 64)
	user, err2 := strconv.ParseInt(field("user"), 10, 64)
	ms, err3 := strconv.ParseInt(field("at"), 10, 64)
	q.Sale, q.User, q.Key, q.At, q.Trace = sale, user, field("key"), time.UnixMilli(ms), field("trace")
	if due, _ := strconv.ParseInt(field("due"), 10, 64); due > 0 {
		d := time.UnixMilli(due)
		q.Due = &d
	}
	if err := errors.Join(err, err1, err2, err3); err != nil || id == 0 || user <= 0 {
		return q, fmt.Errorf("malformed queued order %s in %s: %v", m.ID, stream, m.Values)
	}
	return q, nil
}

// Streams lists the streams that may hold queued orders.
func (qu *Queue) Streams(ctx context.Context) ([]string, error) {
	keys, err := registered(ctx, qu.rdb, qu.streams)
	if err != nil {
		return nil, fmt.Errorf("listing the order streams: %w", err)
	}
	return keys, nil
}

// errNoGroup matches the error XREADGROUP answers for a stream that was
// deleted (or never created) under the registry's feet.
func errNoGroup(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOGROUP") }

// forgetMissing closes the streams a read found without their group:
// dropped while enrolled (a purge, or a writer that enrolled one and died
// before opening it).
func (qu *Queue) forgetMissing(ctx context.Context, streams []string) error {
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
func (qu *Queue) Claim(ctx context.Context, consumer, stream string, minIdle time.Duration, count int64) (good, bad []QueuedOrder, err error) {
	msgs, _, err := qu.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
		Stream: stream, Group: Group, Consumer: consumer, MinIdle: minIdle, Start: "0-0", Count: count,
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

// Pending is an order in the pending index: queued by the async mode's
// take, or refused by the database (Failed says why; Shard and Sale are
// then unknown) and not settled yet.
type Pending struct {
	Product, User, Sale int64
	Shard               int
	Failed              string
}

// pendingKey is the pending index an order of shard of l is queued in:
// the day's on one Redis, the shard's on a cluster.
func (qu *Queue) pendingKey(l Layout, shard int, id idgen.ID) string {
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
			if l, shard, err := parseStream(st); err == nil {
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
// (async.lua), or "failed @product:user reason" (DeadLetter).
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
				cmds[i] = pipe.HExists(ctx, qu.pendingKey(l, e.Shard, e.Order), e.Order.String())
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

// Ack removes written orders from their streams and from the pending index.
func (qu *Queue) Ack(ctx context.Context, qs []QueuedOrder) error {
	_, err := qu.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, q := range qs {
			pipe.XAck(ctx, q.Stream, Group, q.MsgID)
			pipe.XDel(ctx, q.Stream, q.MsgID)
			if q.Order != 0 {
				pipe.HDel(ctx, qu.pendingKey(q.Layout, q.Shard, q.Order), q.Order.String())
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
func (qu *Queue) DeadLetter(ctx context.Context, q QueuedOrder, reason string) error {
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
		if err := qu.rdb.XAdd(ctx, &redis.XAddArgs{Stream: DeadLetterKey, Values: append(vals, "reason", reason)}).Err(); err != nil {
			return fmt.Errorf("parking order %s in the dead letters: %w", q.Order, err)
		}
		if err := qu.rdb.HSet(ctx, PendingKey(q.Order.Time()), q.Order.String(), failed).Err(); err != nil {
			return fmt.Errorf("marking dead order %s failed: %w", q.Order, err)
		}
	} else {
		keys = append(keys, DeadLetterKey, l.BuyerKey(q.User), PendingKey(q.Order.Time()), DeadCountKey)
	}
	err := deadLetterScript.Run(ctx, qu.rdb, keys, Group, q.MsgID, q.Order.String(), q.User, reason, fields.String(),
		deadField(l.ID, q.Sale), failed).Err()
	if err != nil {
		return fmt.Errorf("parking order %s in the dead letters: %w", q.Order, err)
	}
	if qu.split {
		if err := forget(ctx, qu.rdb, Product{Layout: l}, q.User, "", q.Order.String()); err != nil {
			return err
		}
		// Failed, no longer queued; a failure leaves the entry to go with
		// its stream's close (Pending reads the failed first).
		_ = qu.rdb.HDel(ctx, l.ShardPendingKey(q.Shard), q.Order.String()).Err()
		if err := qu.rdb.HIncrBy(ctx, DeadCountKey, deadField(l.ID, q.Sale), 1).Err(); err != nil {
			return fmt.Errorf("counting dead order %s: %w", q.Order, err)
		}
	}
	qu.flags.Clear(l.ID)
	return nil
}

// ForgetDrained closes the registered streams that hold no order, and, on
// a Redis Cluster, took none for DrainIdle; the next async take on one
// opens it again. It returns how many it closed.
func (qu *Queue) ForgetDrained(ctx context.Context) (int, error) {
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
// its stream closed costs two more round trips (registry.go), which a
// stream drained between two orders of a running sale should not. On one
// Redis there is no such cost, and an empty stream closes at once.
const DefaultDrainIdle = 30 * time.Second

// DrainIdle sets how long a drained stream stays open on a Redis Cluster
// (DefaultDrainIdle); 0 closes it as soon as it is empty.
func (qu *Queue) DrainIdle(d time.Duration) *Queue {
	qu.drainIdle = max(d, 0)
	return qu
}

// close closes stream if it holds no order (close_stream.lua), and, on a
// cluster, then drops it from the registry at the generation the close
// gave. It reports whether the stream left the registry.
func (qu *Queue) close(ctx context.Context, stream string, idle time.Duration) (bool, error) {
	if !qu.split {
		n, err := closeStreamScript.Run(ctx, qu.rdb, []string{stream, qu.streams}, idle.Milliseconds()).Int()
		if err != nil {
			return false, fmt.Errorf("closing drained stream %s: %w", stream, err)
		}
		return n == 1, nil
	}
	l, shard, err := parseStream(stream)
	if err != nil {
		// Not an order stream: nothing of it to close, only the entry.
		return true, qu.rdb.HDel(ctx, qu.streams, stream).Err()
	}
	gen, err := closeStreamScript.Run(ctx, qu.rdb, []string{stream, l.ShardPendingKey(shard), generationKey(stream)}, idle.Milliseconds()).Int64()
	if err != nil {
		return false, fmt.Errorf("closing drained stream %s: %w", stream, err)
	}
	if gen == 0 {
		return false, nil
	}
	return unenrol(ctx, qu.rdb, qu.streams, stream, gen)
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

func deadField(product, sale int64) string {
	return strconv.FormatInt(product, 10) + ":" + strconv.FormatInt(sale, 10)
}

// DeadLettered counts the orders of a product's sale that went to the dead
// letters: answered 202, refused by the database, their units back on sale.
func (qu *Queue) DeadLettered(ctx context.Context, product, sale int64) (int, error) {
	n, err := qu.rdb.HGet(ctx, DeadCountKey, deadField(product, sale)).Int()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("counting the dead letters of product %d: %w", product, err)
	}
	return n, nil
}
