package outbox

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/idgen"
	"seckill/internal/stock"
)

// groupedCluster is blockingCluster's store and product (six shards of
// 100), their streams' groups made, the streams lying on more than one
// node, and the reader of their queue.
func groupedCluster(t *testing.T) (*redis.ClusterClient, *stock.Store, *RedisStreams, stock.Product, []string) {
	t.Helper()
	c, s, p := blockingCluster(t, 100)
	ctx := t.Context()
	var streams []string
	nodes := map[string]bool{}
	for i := range p.Shards {
		st := p.StreamKey(i)
		if err := c.Client.XGroupCreateMkStream(ctx, st, stock.Group, "0").Err(); err != nil {
			t.Fatal(err)
		}
		node, err := c.Client.MasterForKey(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		nodes[node.Options().Addr] = true
		streams = append(streams, st)
	}
	if len(nodes) < 2 {
		t.Fatalf("the streams lie on %d node; want several", len(nodes))
	}
	return c.Client, s, NewRedisStreams(s.Queue()), p, streams
}

func asyncTake(ctx context.Context, s *stock.Store, p stock.Product, user int64) (stock.Taken, error) {
	return s.Take(ctx, stock.Request{Product: p, Taker: stock.Async{},
		Ticket: stock.Ticket{User: user, Order: idgen.ID(1 + rand.Int64N(1<<50)), Key: "k"}})
}

// blockedReads counts the clients blocked in XREADGROUP over the masters.
func blockedReads(ctx context.Context, cc *redis.ClusterClient) (int, error) {
	var mu sync.Mutex
	n := 0
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		list, err := node.ClientList(ctx).Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for line := range strings.Lines(list) {
			if strings.Contains(line, " flags=b ") && strings.Contains(line, " cmd=xreadgroup") {
				n++
			}
		}
		return nil
	})
	return n, err
}

// awaitBlocked returns once n reads are blocked, or fails the test.
func awaitBlocked(t *testing.T, cc *redis.ClusterClient, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		got, err := blockedReads(t.Context(), cc)
		if err != nil {
			t.Fatal(err)
		}
		if got == n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%d reads never blocked", n)
}

// pendingOf counts, per consumer, the orders delivered and not
// acknowledged over streams.
func pendingOf(t *testing.T, cc *redis.ClusterClient, streams []string) map[string]int64 {
	t.Helper()
	held := map[string]int64{}
	for _, st := range streams {
		p, err := cc.XPending(t.Context(), st, stock.Group).Result()
		if err != nil {
			t.Fatal(err)
		}
		for name, n := range p.Consumers {
			held[name] += n
		}
	}
	return held
}

// A consumer whose reads block on the streams of several nodes receives
// an order as soon as it is taken: each stream's read blocks (one
// XREADGROUP ... BLOCK each), and the one that delivers ends the Read.
// The latencies are logged, not asserted; what is asserted is that every
// stream's read blocks while there is nothing, that each order comes back
// alone, and that StopReading ends the reads.
func TestClusterReadBlocks(t *testing.T) {
	cc, s, rs, p, streams := groupedCluster(t)
	ctx, cancel := context.WithCancel(t.Context())
	type arrival struct {
		q  QueuedOrder
		at time.Time
	}
	arrived := make(chan arrival, 64)
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			good, bad, err := rs.Read(ctx, "reader", streams, 10, 2*time.Second)
			if ctx.Err() != nil {
				err = nil // a Read begun as the test ends
			}
			if err != nil || len(bad) > 0 {
				t.Errorf("read: %v, %d malformed", err, len(bad))
				return
			}
			now := time.Now()
			for _, q := range good {
				arrived <- arrival{q, now}
			}
		}
	})
	const takes = 50
	var lat []time.Duration
	for i := range takes {
		awaitBlocked(t, cc, len(streams))
		start := time.Now()
		tk, err := asyncTake(ctx, s, p, int64(i+1))
		if err != nil {
			t.Fatal(err)
		}
		select {
		case a := <-arrived:
			if a.q.Order != tk.Order {
				t.Fatalf("read order %s, want %s", a.q.Order, tk.Order)
			}
			lat = append(lat, a.at.Sub(start))
		case <-time.After(5 * time.Second):
			t.Fatalf("order %s taken and never read", tk.Order)
		}
	}
	// A Read whose context ends returns; its reads stay in flight until
	// the consumer stops reading. The stream that delivered last has its
	// read issued again by the reader's next Read: wait for it before
	// ending that Read, or the count races the reissue.
	awaitBlocked(t, cc, len(streams))
	cancel()
	wg.Wait()
	if n, err := blockedReads(t.Context(), cc); err != nil || n != len(streams) {
		t.Errorf("%d reads blocked after the last Read, want %d (%v)", n, len(streams), err)
	}
	if good, bad, err := rs.StopReading(t.Context(), "reader"); len(good)+len(bad) > 0 || err != nil {
		t.Errorf("stopping: %d orders, %d malformed, %v; want none", len(good), len(bad), err)
	}
	slices.Sort(lat)
	t.Logf("from a take's call to its order read, over %d takes: p50 %v, p90 %v, max %v",
		takes, lat[takes/2], lat[takes*9/10], lat[takes-1])
	if n, err := blockedReads(t.Context(), cc); err != nil || n != 0 {
		t.Errorf("%d reads still blocked after the reader stopped (%v)", n, err)
	}
	if held := pendingOf(t, cc, streams); held["reader"] != takes || len(held) != 1 {
		t.Errorf("delivered and unacknowledged: %v; want the %d read, all to reader", held, takes)
	}
}

// Reads left in flight, by a Read that returned with another stream's
// order or on its context, lose nothing: with two consumers reading while
// buyers take on every shard, and half their Reads cancelled mid-wait,
// every order taken is returned once, by a Read or by StopReading, and the
// orders delivered to each consumer are exactly those returned to it:
// none left delivered and not returned.
func TestClusterReadEndedEarlyLosesNothing(t *testing.T) {
	cc, s, rs, p, streams := groupedCluster(t)
	ctx, stop := context.WithCancel(t.Context())
	var mu sync.Mutex
	returned := map[string]map[idgen.ID]int{"a": {}, "b": {}}
	var wg sync.WaitGroup
	for name := range returned {
		wg.Go(func() {
			for ctx.Err() == nil {
				rctx, cancel := context.WithCancel(ctx)
				if rand.IntN(2) == 0 {
					rctx, cancel = context.WithTimeout(ctx, time.Duration(rand.IntN(3000))*time.Microsecond)
				}
				good, bad, err := rs.Read(rctx, name, streams, 5, time.Second)
				if rctx.Err() != nil {
					// Its pipeline may fail on the context: what it
					// delivered comes back all the same.
					err = nil
				}
				cancel()
				if err != nil || len(bad) > 0 {
					t.Errorf("read: %v, %d malformed", err, len(bad))
					return
				}
				mu.Lock()
				for _, q := range good {
					returned[name][q.Order]++
				}
				mu.Unlock()
			}
		})
	}
	const buyers, each = 6, 50
	taken := make(chan idgen.ID, buyers*each)
	var buying sync.WaitGroup
	for b := range buyers {
		buying.Go(func() {
			for i := range each {
				tk, err := asyncTake(ctx, s, p, int64(b*each+i+1))
				if err != nil {
					t.Error(err)
					return
				}
				taken <- tk.Order
				time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
			}
		})
	}
	buying.Wait()
	close(taken)
	all := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(returned["a"]) + len(returned["b"])
	}
	for deadline := time.Now().Add(10 * time.Second); all() < buyers*each && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	stop()
	wg.Wait()
	for name := range returned {
		good, bad, err := rs.StopReading(t.Context(), name)
		if err != nil || len(bad) > 0 {
			t.Errorf("stopping %s: %v, %d malformed", name, err, len(bad))
		}
		for _, q := range good {
			returned[name][q.Order]++
		}
	}
	if n, err := blockedReads(t.Context(), cc); err != nil || n != 0 {
		t.Errorf("%d reads still blocked after the readers stopped (%v)", n, err)
	}
	for id := range taken {
		if n := returned["a"][id] + returned["b"][id]; n != 1 {
			t.Errorf("order %s returned %d times", id, n)
		}
	}
	held := pendingOf(t, cc, streams)
	for name, got := range returned {
		if held[name] != int64(len(got)) {
			t.Errorf("%d orders delivered to %s, %d returned to it", held[name], name, len(got))
		}
	}
	t.Logf("returned to a: %d, to b: %d", len(returned["a"]), len(returned["b"]))
}

// A stream deleted while a Read blocks on it (closed as drained) ends that
// stream's read without an error, and the Read goes on waiting on the
// others.
func TestClusterReadOutlivesADeletedStream(t *testing.T) {
	cc, _, rs, _, streams := groupedCluster(t)
	ctx := t.Context()
	type read struct {
		good []QueuedOrder
		err  error
	}
	done := make(chan read, 1)
	go func() {
		good, _, err := rs.Read(ctx, "reader", streams, 10, 5*time.Second)
		done <- read{good, err}
	}()
	awaitBlocked(t, cc, len(streams))
	if err := cc.Del(ctx, streams[0]).Err(); err != nil {
		t.Fatal(err)
	}
	awaitBlocked(t, cc, len(streams)-1)
	// An order added as a take adds it, on a stream still read (a take
	// might land on the deleted one's shard, and open it again).
	id := idgen.ID(1 + rand.Int64N(1<<50))
	err := cc.XAdd(ctx, &redis.XAddArgs{Stream: streams[1], Values: []any{
		"id", id.String(), "user", "1", "sale", "0", "key", "k", "at", strconv.FormatInt(time.Now().UnixMilli(), 10)}}).Err()
	if err != nil {
		t.Fatal(err)
	}
	got := <-done
	if got.err != nil || len(got.good) != 1 || got.good[0].Order != id {
		t.Errorf("read %v, %v; want order %s alone", got.good, got.err, id)
	}
	if good, _, err := rs.StopReading(ctx, "reader"); len(good) > 0 || err != nil {
		t.Errorf("stopping: %d orders, %v; want none", len(good), err)
	}
}
