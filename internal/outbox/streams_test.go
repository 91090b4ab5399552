package outbox

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/idgen"
	"seckill/internal/stock"
	"seckill/internal/testkit"
)

// On a Redis Cluster, a consumer with nothing to read sends its streams a
// few commands a second, not one read per stream every 20 ms: its reads
// block. The commands its nodes ran over two idle seconds are logged.
func TestStreamsIdleOnCluster(t *testing.T) {
	c, s, p := blockingCluster(t, 1)
	ctx := t.Context()
	const shards = clusterShards
	// One unit per shard: a take on each, so one stream each.
	for i := range shards {
		if _, err := s.Take(ctx, stock.Request{Product: p, Taker: stock.Async{},
			Ticket: stock.Ticket{User: int64(i + 1), Order: idgen.ID(1 + rand.Int64N(1<<50)), Key: "k"}}); err != nil {
			t.Fatal(err)
		}
	}
	cons := NewConsumer("idle", NewStreams(NewRedisStreams(s.Queue()), "idle", func(context.Context, int64) {}, Options{Log: quiet}),
		&fakeSink{}, Options{Log: quiet})
	cons.Start()
	t.Cleanup(func() { cons.Close() })
	for deadline := time.Now().Add(10 * time.Second); cons.Orders() < shards; {
		if time.Now().After(deadline) {
			t.Fatalf("%d orders written of %d", cons.Orders(), shards)
		}
		time.Sleep(time.Millisecond)
	}

	calls := idleCalls(t, c.Client, 2*time.Second)
	t.Logf("commands over 2 idle seconds, %d streams: %v", shards, calls)
	// Per DefaultBlock (500ms): one blocking read per stream, 24 in 2 s
	// (twice that allowed); a poll every 20 ms sent 600.
	if n := calls["xreadgroup"]; n > 2*shards*int64(2*time.Second/DefaultBlock) {
		t.Errorf("%d XREADGROUP in 2 idle seconds over %d streams: the reads poll", n, shards)
	}

	// A product's first async order opens a stream the consumer does not
	// read yet: it is listed again after its next empty read, within a
	// Block, not up to a second more. Each take waits a random while
	// first, so that it falls anywhere in the consumer's turn.
	var lat []time.Duration
	for i := range int64(3) {
		q := stock.Product{Layout: stock.Layout{ID: p.ID + 1 + i, Shards: 1, Epoch: 1}, Where: stock.InRedis, Fallback: true}
		t.Cleanup(func() { _ = stock.Purge(context.Background(), c.Client, []int64{q.ID}) })
		if err := s.LayOut(ctx, q, []int{1}, 1); err != nil {
			t.Fatal(err)
		}
		time.Sleep(rand.N(time.Second)) // decorrelation, not a condition awaited
		start := time.Now()
		if _, err := s.Take(ctx, stock.Request{Product: q, Taker: stock.Async{},
			Ticket: stock.Ticket{User: 1, Order: idgen.ID(1 + rand.Int64N(1<<50)), Key: "k"}}); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); cons.Orders() < shards+1+i; {
			if time.Now().After(deadline) {
				t.Fatal("the order of a new stream was never written")
			}
			time.Sleep(time.Millisecond)
		}
		lat = append(lat, time.Since(start))
	}
	t.Logf("new streams' first orders written after their takes: %v (Block %v)", lat, DefaultBlock)
}

// idleCalls resets the masters' command statistics, waits d, and returns
// how many times each command ran on them meanwhile.
func idleCalls(t *testing.T, cc *redis.ClusterClient, d time.Duration) map[string]int64 {
	t.Helper()
	ctx := t.Context()
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		return node.ConfigResetStat(ctx).Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(d) // the window measured, not a condition awaited
	var mu sync.Mutex
	calls := map[string]int64{}
	err = cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		info, err := node.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for line := range strings.Lines(info) {
			name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
			if !ok {
				continue
			}
			n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			calls[name] += n
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return calls
}

// On a Redis Cluster an order costs its consumer about one XREADGROUP,
// whether the orders trickle (one at a time, 100 a second: a poll every
// 20 ms sent 6 per order over 6 streams) or come in a burst (8 buyers at
// once); the batches' count is logged beside.
func TestStreamsReadsPerOrderOnCluster(t *testing.T) {
	c, s, p := blockingCluster(t, 500)
	ctx := t.Context()
	const shards = clusterShards
	var user atomic.Int64
	take := func() {
		if _, err := s.Take(ctx, stock.Request{Product: p, Taker: stock.Async{},
			Ticket: stock.Ticket{User: user.Add(1), Order: idgen.ID(1 + rand.Int64N(1<<50)), Key: "k"}}); err != nil {
			t.Error(err)
		}
	}
	for range shards {
		take()
	}
	cons := NewConsumer("perorder", NewStreams(NewRedisStreams(s.Queue()), "perorder", func(context.Context, int64) {}, Options{Log: quiet}),
		&fakeSink{}, Options{Log: quiet})
	cons.Start()
	t.Cleanup(func() { cons.Close() })
	for deadline := time.Now().Add(10 * time.Second); cons.Orders() < shards; {
		if time.Now().After(deadline) {
			t.Fatalf("%d orders written of %d", cons.Orders(), shards)
		}
		time.Sleep(time.Millisecond)
	}
	measure := func(name string, takes func()) {
		o, b := cons.Orders(), cons.Batches()
		done := make(chan map[string]int64)
		go func() { done <- idleCalls(t, c.Client, 1500*time.Millisecond) }()
		takes()
		calls := <-done
		o, b = cons.Orders()-o, cons.Batches()-b
		per := float64(calls["xreadgroup"]) / float64(max(o, 1))
		t.Logf("%s: %d orders in %d batches, %d XREADGROUP (%.2f an order)", name, o, b, calls["xreadgroup"], per)
		if per > 2 {
			t.Errorf("%s: %.2f XREADGROUP an order", name, per)
		}
	}
	measure("100 a second", func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for range 100 {
			<-tick.C
			take()
		}
	})
	measure("8 buyers at once", func() {
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 100 {
					take()
				}
			})
		}
		wg.Wait()
	})
}

// clusterShards is the shards of blockingCluster's product: a stream each.
const clusterShards = 6

// blockingCluster is a cluster whose consumers block (not miniredis: it
// knows no CLIENT ID, and a cluster of it is polled), a store on it, and a
// product of its own of clusterShards shards of perShard units each,
// purged at the end.
func blockingCluster(t *testing.T, perShard int) (*testkit.RedisCluster, *stock.Store, stock.Product) {
	t.Helper()
	c := testkit.NewRedisCluster(t)
	if c.Kind() == testkit.RedisEmbedded {
		testkit.Skip(t, testkit.NoRedisServer, "miniredis knows no CLIENT ID: a cluster of it is polled")
	}
	s := stock.NewStore(c.Client, nil)
	const shards = clusterShards
	p := streamProduct(t, c.Client, shards)
	levels := make([]int, shards)
	for i := range levels {
		levels[i] = perShard
	}
	if err := s.LayOut(t.Context(), p, levels, shards*perShard); err != nil {
		t.Fatal(err)
	}
	return c, s, p
}

// A read round on a cluster whose node fails mid-sale returns what the
// living nodes' streams delivered beside the failure, and the consumer
// writes it then: orders delivered and dropped would wait for the claim
// (ClaimIdle) however soon the node is back. The node fails for the
// consumer's client alone (its connections to the node refuse every byte),
// so the first round reads the dead stream and the living ones in one
// pipeline, every time; TestFailoverLeavesNoOrderBehind (faults) kills a
// real master, where that overlap is up to timing.
func TestReadRoundKeepsWhatLivingNodesDelivered(t *testing.T) {
	c := testkit.NewRedisCluster(t)
	ctx := t.Context()
	const shards = clusterShards
	var (
		p      stock.Product
		victim string
	)
	for victim == "" {
		p = streamProduct(t, c.Client, shards)
		victim = streamNodeBut(t, c.Client, p, stock.StreamsKey)
	}
	setup := stock.NewStore(c.Client, nil)
	levels := make([]int, shards)
	for i := range levels {
		levels[i] = 1
	}
	if err := setup.LayOut(ctx, p, levels, shards); err != nil {
		t.Fatal(err)
	}
	var down atomic.Bool
	cc := c.NewClient(t, &redis.ClusterOptions{Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr != victim {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}
		if down.Load() {
			return nil, errNodeDown
		}
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		return failingConn{Conn: conn, down: &down}, err
	}})
	// Every shard's stream opened and enrolled, with one order each.
	living := 0
	for i := range shards {
		if _, err := asyncTake(ctx, setup, p, int64(i+1)); err != nil {
			t.Fatal(err)
		}
		if nodeOf(t, c.Client, p.StreamKey(i)) != victim {
			living++
		}
	}
	src := NewStreams(NewRedisStreams(stock.NewStore(cc, nil).Queue()), "reader", func(context.Context, int64) {},
		Options{Block: 50 * time.Millisecond, Log: quiet})
	down.Store(true)
	b, err := src.Next(ctx, nil)
	if err == nil {
		t.Fatalf("a round over a dead node's stream failed nothing (%d orders)", len(b.Orders))
	}
	if len(b.Orders) != living {
		t.Fatalf("a round over a dead node's stream returned %d orders beside its failure, want the living streams' %d (%v)", len(b.Orders), living, err)
	}
	t.Logf("%d orders returned beside: %v", living, err)
}

var errNodeDown = errors.New("the node is down")

// failingConn is a connection that refuses every byte once down is set.
type failingConn struct {
	net.Conn
	down *atomic.Bool
}

func (c failingConn) Read(b []byte) (int, error) {
	if c.down.Load() {
		return 0, errNodeDown
	}
	return c.Conn.Read(b)
}

func (c failingConn) Write(b []byte) (int, error) {
	if c.down.Load() {
		return 0, errNodeDown
	}
	return c.Conn.Write(b)
}

// streamNodeBut returns the address of a node that holds some of p's
// streams, not all of them, and not key; or "" if none does.
func streamNodeBut(t *testing.T, cc *redis.ClusterClient, p stock.Product, key string) string {
	t.Helper()
	avoid := nodeOf(t, cc, key)
	on := map[string]int{}
	for i := range p.Shards {
		on[nodeOf(t, cc, p.StreamKey(i))]++
	}
	for node, n := range on {
		if node != avoid && n < p.Shards {
			return node
		}
	}
	return ""
}

// nodeOf returns the address of the master of key's slot.
func nodeOf(t *testing.T, cc *redis.ClusterClient, key string) string {
	t.Helper()
	node, err := cc.MasterForKey(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	return node.Options().Addr
}
