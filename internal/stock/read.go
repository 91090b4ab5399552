package stock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Read delivers up to count new orders per stream to consumer, waiting up
// to block for one. Malformed entries come back in bad. On a cluster, a
// stream whose node fails does not stop the others: what they delivered
// comes back beside the error, and the caller must handle it, or it stays
// delivered and unacknowledged until a claim.
func (qu *Queue) Read(ctx context.Context, consumer string, streams []string, count int64, block time.Duration) (good []QueuedOrder, bad []QueuedOrder, err error) {
	if len(streams) == 0 {
		return nil, nil, nil
	}
	if qu.store.split() {
		return qu.readEach(ctx, consumer, streams, count, block)
	}
	args := append(append([]string{}, streams...), make([]string, len(streams))...)
	for i := range streams {
		args[len(streams)+i] = ">"
	}
	res, err := qu.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: Group, Consumer: consumer, Streams: args, Count: count, Block: block}).Result()
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

// maxBlocking bounds the blocking reads of one Read on a cluster: each
// holds a connection of its node's pool while it waits (256 per node in
// the app), and keeps it for the next Read (see blockers). 64 leaves the
// purchases at least three quarters of a node's pool however the streams
// fall; the streams past it are polled every readPoll, as all were before.
const maxBlocking = 64

// readEach is Read on a Redis Cluster, where one XREADGROUP may not name
// streams in different slots. First one XREADGROUP per stream, without
// BLOCK, in one pipeline (one round trip per node): while orders flow,
// that is the whole read. When none is there, one blocking XREADGROUP per
// stream, all at once (readBlocking): an order is delivered as soon as it
// is added, with no poll in between.
func (qu *Queue) readEach(ctx context.Context, consumer string, streams []string, count int64, block time.Duration) (good, bad []QueuedOrder, err error) {
	var r readings
	qu.readNow(ctx, &r, consumer, streams, count)
	// BLOCK is in milliseconds, and BLOCK 0 waits for ever.
	if r.any() || block < time.Millisecond {
		return r.result(ctx, qu)
	}
	qu.readBlocking(ctx, &r, consumer, streams, count, block)
	return r.result(ctx, qu)
}

// readNow reads every stream once, without BLOCK: one XREADGROUP per
// stream in one pipeline.
func (qu *Queue) readNow(ctx context.Context, r *readings, consumer string, streams []string, count int64) {
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
	return &redis.XReadGroupArgs{Group: Group, Consumer: consumer, Streams: []string{stream, ">"}, Count: count, Block: block}
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
// cluster client follows it on the next Read's pipeline.
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
func (r *readings) result(ctx context.Context, qu *Queue) (good, bad []QueuedOrder, err error) {
	if len(r.failed) > 0 {
		return r.good, r.bad, errors.Join(r.failed...)
	}
	if len(r.missing) > 0 {
		return r.good, r.bad, qu.forgetMissing(ctx, r.missing)
	}
	return r.good, r.bad, nil
}

// readBlocking waits up to block for an order on any of streams: one
// XREADGROUP ... BLOCK per stream, each on a connection of its own, all at
// once. When one delivers (or fails), the others are ended with CLIENT
// UNBLOCK, and awaited: a read is never abandoned mid-command, so an
// order delivered to the consumer is always returned, never left pending
// for a claim. A read unblocked before it delivered delivers nothing.
func (qu *Queue) readBlocking(ctx context.Context, r *readings, consumer string, streams []string, count int64, block time.Duration) {
	cc, _ := qu.rdb.(*redis.ClusterClient)
	var waits []*blocker
	var rest []string
	for _, st := range streams {
		if len(waits) == maxBlocking {
			rest = append(rest, st)
			continue
		}
		b, err := qu.blockers.take(ctx, cc, st)
		if err != nil {
			rest = append(rest, st) // its failure, if it lasts, is the poll's
			continue
		}
		waits = append(waits, b)
	}
	replies := make(chan blockReply, len(waits))
	// Not the caller's context: go-redis does not end a command on it
	// anyway, and a read is ended by CLIENT UNBLOCK only, whose reply
	// says whether it delivered.
	rctx := context.WithoutCancel(ctx)
	for i, b := range waits {
		go func() {
			res, err := b.conn.XReadGroup(rctx, readArgs(consumer, b.stream, count, block)).Result()
			replies <- blockReply{i: i, res: res, err: err}
		}()
	}
	stop := make(chan struct{})
	polled := make(chan readings, 1)
	if len(rest) > 0 {
		go func() { polled <- qu.poll(ctx, stop, consumer, rest, count, time.Now().Add(block)) }()
	}
	w := waiting{qu: qu, r: r, waits: waits, open: len(waits), done: make([]bool, len(waits)), replies: replies}
	w.wait(ctx, polled, len(rest) > 0)
	close(stop)
	w.unblockAll(rctx)
	if len(rest) > 0 {
		r.merge(<-polled)
	}
}

// blockReply is one blocking read's reply.
type blockReply struct {
	i   int
	res []redis.XStream
	err error
}

// waiting is the blocking reads of one readBlocking in flight.
type waiting struct {
	qu      *Queue
	r       *readings
	waits   []*blocker
	open    int    // how many have not replied
	done    []bool // which have
	replies chan blockReply
}

// wait returns when a read delivers or fails, when every read timed out,
// or when ctx is done; polled answers for the streams polled, if any.
func (w *waiting) wait(ctx context.Context, polled chan readings, polling bool) {
	for w.open > 0 || polling {
		select {
		case rep := <-w.replies:
			w.take(rep)
			if w.r.any() {
				return
			}
		case got := <-polled:
			polling = false
			w.r.merge(got)
			if w.r.any() {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// take records a read's reply and hands its connection back.
func (w *waiting) take(rep blockReply) {
	b := w.waits[rep.i]
	w.done[rep.i] = true
	w.open--
	w.r.add(b.stream, rep.res, rep.err)
	var rerr redis.Error
	if rep.err != nil && !errors.As(rep.err, &rerr) {
		// Not the server's answer: the connection itself failed.
		w.qu.blockers.drop(b)
		return
	}
	w.qu.blockers.put(b)
}

// unblockRetry is how long unblockAll waits for the reads it unblocked to
// reply before it unblocks again those that did not: a read whose command
// had not reached its node yet was not blocked, and will block when it does.
const unblockRetry = 2 * time.Millisecond

// unblockAll ends the reads still waiting, and collects their replies: a
// read that delivered before its CLIENT UNBLOCK arrived returns its orders.
func (w *waiting) unblockAll(ctx context.Context) {
	for w.open > 0 {
		w.unblock(ctx)
		t := time.NewTimer(unblockRetry)
	collect:
		for w.open > 0 {
			select {
			case rep := <-w.replies:
				w.take(rep)
			case <-t.C:
				break collect
			}
		}
		t.Stop()
	}
}

// unblock sends CLIENT UNBLOCK for each read still waiting: one pipeline
// per node. A failure is left to the read's own timeout.
func (w *waiting) unblock(ctx context.Context) {
	byNode := make(map[*redis.Client][]int64)
	for i, b := range w.waits {
		if !w.done[i] {
			byNode[b.node] = append(byNode[b.node], b.id)
		}
	}
	for node, ids := range byNode {
		_, _ = node.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for _, id := range ids {
				pipe.ClientUnblock(ctx, id)
			}
			return nil
		})
	}
}

// poll reads streams without BLOCK every readPoll until one delivers, stop
// closes, or deadline passes.
func (qu *Queue) poll(ctx context.Context, stop <-chan struct{}, consumer string, streams []string, count int64, deadline time.Time) readings {
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

// blocker is a connection of a node's pool kept for blocking reads, and
// its client id there, by which CLIENT UNBLOCK ends its read.
type blocker struct {
	node   *redis.Client
	conn   *redis.Conn
	id     int64
	stream string // the stream it reads now
}

// blockers keeps, per node, the connections of blocking reads between two
// Reads, so that a Read asks no CLIENT ID: at most maxBlocking per node.
// A node that does not know CLIENT ID (miniredis) has its streams polled.
type blockers struct {
	mu    sync.Mutex
	free  map[*redis.Client][]*blocker
	plain map[*redis.Client]bool // nodes without CLIENT ID
}

// take returns a connection to the node of stream's slot.
func (bs *blockers) take(ctx context.Context, cc *redis.ClusterClient, stream string) (*blocker, error) {
	if cc == nil {
		return nil, errors.New("not a cluster")
	}
	node, err := cc.MasterForKey(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("finding the node of %s: %w", stream, err)
	}
	bs.mu.Lock()
	if bs.plain[node] {
		bs.mu.Unlock()
		return nil, errors.New("the node does not know CLIENT ID")
	}
	if free := bs.free[node]; len(free) > 0 {
		b := free[len(free)-1]
		bs.free[node] = free[:len(free)-1]
		bs.mu.Unlock()
		b.stream = stream
		return b, nil
	}
	bs.mu.Unlock()
	conn := node.Conn()
	id, err := conn.ClientID(ctx).Result()
	if err != nil {
		_ = conn.Close()
		var rerr redis.Error
		if errors.As(err, &rerr) {
			bs.mu.Lock()
			if bs.plain == nil {
				bs.plain = make(map[*redis.Client]bool)
			}
			bs.plain[node] = true
			bs.mu.Unlock()
		}
		return nil, fmt.Errorf("asking a connection's id for %s: %w", stream, err)
	}
	return &blocker{node: node, conn: conn, id: id, stream: stream}, nil
}

// put keeps b for the next Read, or hands its connection back to the pool.
func (bs *blockers) put(b *blocker) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if len(bs.free[b.node]) >= maxBlocking {
		_ = b.conn.Close()
		return
	}
	if bs.free == nil {
		bs.free = make(map[*redis.Client][]*blocker)
	}
	bs.free[b.node] = append(bs.free[b.node], b)
}

// drop closes a connection that failed.
func (bs *blockers) drop(b *blocker) { _ = b.conn.Close() }

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
