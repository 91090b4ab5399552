package outbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxBlocking bounds the blocking reads one consumer keeps in flight on a
// cluster: each holds a connection of its node's pool while it waits (256
// per node in the app). 64 leaves the purchases at least three quarters
// of a node's pool however the streams fall; the streams past it are
// polled every readPoll, as all were before.
const maxBlocking = 64

// reader is one consumer's blocking reads on a cluster: at most one per
// stream, each kept in flight until it replies, from one Read to the next.
// A Read returns when one delivers and leaves the others waiting; what
// they deliver later the next Read returns. A read is never cut off
// mid-command (but by StopReading), so an order delivered to the consumer
// is returned by one of its Reads. Not cancelling also saves commands:
// an order costs the one XREADGROUP that delivered it, sent again after.
type reader struct {
	mu     sync.Mutex          // one Read at a time
	flying map[string]*blocker // stream → its read in flight
	done   chan blockReply     // the replies, maxBlocking at most
}

// blockReply is one blocking read's reply.
type blockReply struct {
	b     *blocker
	count int64 // the most it could deliver
	res   []redis.XStream
	err   error
}

// reader returns consumer's reader, made on its first Read.
func (qu *RedisStreams) reader(consumer string) *reader {
	qu.readersMu.Lock()
	defer qu.readersMu.Unlock()
	rd := qu.readers[consumer]
	if rd == nil {
		rd = &reader{flying: make(map[string]*blocker), done: make(chan blockReply, maxBlocking)}
		if qu.readers == nil {
			qu.readers = make(map[string]*reader)
		}
		qu.readers[consumer] = rd
	}
	return rd
}

// wait starts a blocking read on each of streams that has none in flight,
// and waits up to block for one to deliver or fail, or for ctx. The
// streams it cannot block on are polled meanwhile.
func (rd *reader) wait(ctx context.Context, qu *RedisStreams, got *readings, consumer string, streams []string, count int64, block time.Duration) {
	rest := rd.launch(ctx, qu, consumer, streams, count, block)
	stop := make(chan struct{})
	polled := make(chan readings, 1)
	polling := len(rest) > 0
	if polling {
		go func() { polled <- qu.poll(ctx, stop, consumer, rest, count, time.Now().Add(block)) }()
	}
	want := setOf(streams)
	t := time.NewTimer(block)
	defer t.Stop()
	for !got.any() {
		select {
		case rep := <-rd.done:
			again := rd.settle(ctx, qu, got, consumer, want, rep)
			again = append(again, rd.landed(ctx, qu, got, consumer, want)...)
			rd.launch(ctx, qu, consumer, again, count, block)
			continue
		case p := <-polled:
			got.merge(p)
			polling = false
			continue
		case <-t.C:
		case <-ctx.Done():
		}
		break
	}
	close(stop)
	if polling {
		got.merge(<-polled)
	}
}

func setOf(streams []string) map[string]bool {
	set := make(map[string]bool, len(streams))
	for _, st := range streams {
		set[st] = true
	}
	return set
}

// launch starts a blocking read on each of streams that has none in
// flight, up to maxBlocking in all, and returns those it could not: past
// the bound, or on a node that cannot be reached or knows no CLIENT ID.
func (rd *reader) launch(ctx context.Context, qu *RedisStreams, consumer string, streams []string, count int64, block time.Duration) (rest []string) {
	cc, _ := qu.rdb.(*redis.ClusterClient)
	// Not the caller's context: go-redis does not end a command on it
	// anyway, and a read outlives its Read.
	rctx := context.WithoutCancel(ctx)
	for _, st := range streams {
		if rd.flying[st] != nil {
			continue
		}
		if len(rd.flying) == maxBlocking {
			rest = append(rest, st)
			continue
		}
		b, err := qu.blockers.take(ctx, cc, st)
		if err != nil {
			rest = append(rest, st) // its failure, if it lasts, is the poll's
			continue
		}
		rd.flying[st] = b
		go func() {
			res, err := b.conn.XReadGroup(rctx, readArgs(consumer, b.stream, count, block)).Result()
			rd.done <- blockReply{b: b, count: count, res: res, err: err}
		}()
	}
	return rest
}

// idle returns those of streams that have no read in flight.
func (rd *reader) idle(streams []string) []string {
	var idle []string
	for _, st := range streams {
		if rd.flying[st] == nil {
			idle = append(idle, st)
		}
	}
	return idle
}

// landed takes the replies that came, without waiting, and returns the
// streams of want that may wait again (see settle).
func (rd *reader) landed(ctx context.Context, qu *RedisStreams, got *readings, consumer string, want map[string]bool) (again []string) {
	for rep, ok := rd.next(); ok; rep, ok = rd.next() {
		again = append(again, rd.settle(ctx, qu, got, consumer, want, rep)...)
	}
	return again
}

// settle takes a read's reply, and returns its stream if the stream is
// one of want and its read may wait again: it timed out, or it emptied the
// stream (delivered less than it could), and a read in flight will deliver
// the next order the moment it comes, without the Read's pipeline. A
// redirected read's stream is read through the cluster client at once.
func (rd *reader) settle(ctx context.Context, qu *RedisStreams, got *readings, consumer string, want map[string]bool, rep blockReply) []string {
	st := rep.b.stream
	switch rd.land(qu, got, rep) {
	case timedOut, emptied:
		if want[st] {
			return []string{st}
		}
	case redirected:
		qu.rdb.(*redis.ClusterClient).ReloadState(ctx)
		qu.readNow(ctx, got, consumer, []string{st}, rep.count)
	}
	return nil
}

// next returns a reply that came, if one did, without waiting.
func (rd *reader) next() (blockReply, bool) {
	select {
	case rep := <-rd.done:
		return rep, true
	default:
		return blockReply{}, false
	}
}

// An ending is how a read ended.
type ending int

const (
	answered   ending = iota // delivered all it could, failed, or its stream went
	emptied                  // delivered less than it could: its stream is empty
	timedOut                 // its BLOCK ran out
	redirected               // MOVED or ASK: its slot is on another node now
)

// land records a read's reply and hands its connection back.
func (rd *reader) land(qu *RedisStreams, got *readings, rep blockReply) ending {
	delete(rd.flying, rep.b.stream)
	got.add(rep.b.stream, rep.res, rep.err)
	var rerr redis.Error
	if rep.err != nil && !errors.As(rep.err, &rerr) {
		// Not the server's answer: the connection itself failed.
		qu.blockers.drop(rep.b)
		return answered
	}
	qu.blockers.put(rep.b)
	_, moved := redis.IsMovedError(rep.err)
	_, ask := redis.IsAskError(rep.err)
	n := 0
	for _, st := range rep.res {
		n += len(st.Messages)
	}
	switch {
	case errors.Is(rep.err, redis.Nil):
		return timedOut
	case moved || ask:
		return redirected
	case rep.err == nil && n > 0 && int64(n) < rep.count:
		return emptied
	}
	return answered
}

// StopReading ends consumer's blocking reads on a cluster, for a consumer
// that stops: with CLIENT UNBLOCK, and waits for their replies. It returns
// what they delivered meanwhile, which the consumer holds as it holds any
// batch it did not write: acknowledged by nobody, claimed by another
// consumer after its idle time. On one Redis it has nothing to do.
func (qu *RedisStreams) StopReading(ctx context.Context, consumer string) (good, bad []QueuedOrder, err error) {
	qu.readersMu.Lock()
	rd := qu.readers[consumer]
	delete(qu.readers, consumer)
	qu.readersMu.Unlock()
	if rd == nil {
		return nil, nil, nil
	}
	rd.mu.Lock()
	defer rd.mu.Unlock()
	var got readings
	ctx = context.WithoutCancel(ctx)
	for len(rd.flying) > 0 {
		rd.unblock(ctx)
		t := time.NewTimer(unblockRetry)
	replies:
		for len(rd.flying) > 0 {
			select {
			case rep := <-rd.done:
				rd.land(qu, &got, rep)
			case <-t.C:
				break replies
			}
		}
		t.Stop()
	}
	return got.good, got.bad, errors.Join(got.failed...)
}

// unblockRetry is how long StopReading waits for the reads it unblocked
// to reply before it unblocks again those that did not: a read whose
// command had not reached its node yet was not blocked, and blocks when
// it arrives.
const unblockRetry = 2 * time.Millisecond

// unblock sends CLIENT UNBLOCK for each read in flight: one pipeline per
// node. A failure is left to the read's own timeout.
func (rd *reader) unblock(ctx context.Context) {
	byNode := make(map[*redis.Client][]int64)
	for _, b := range rd.flying {
		byNode[b.node] = append(byNode[b.node], b.id)
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
