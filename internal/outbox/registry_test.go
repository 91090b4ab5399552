package outbox

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/idgen"
	"seckill/internal/stock"
	"seckill/internal/testkit"
)

// streamProduct is a product of its own on rdb, its keys purged when the
// test ends.
func streamProduct(t *testing.T, rdb redis.UniversalClient, shards int) stock.Product {
	t.Helper()
	id := 3_000_000 + rand.Int64N(1<<40)
	t.Cleanup(func() { _ = stock.Purge(context.Background(), rdb, []int64{id}) })
	return stock.Product{Layout: stock.Layout{ID: id, Shards: shards, Epoch: 1}, Where: stock.InRedis, Fallback: true}
}

// A drained stream leaves the consumers' registry, with its pending index,
// on one Redis at once and on a cluster once it took nothing for the drain
// idle time; the next take opens and enrols it again, and its order is
// read.
func TestDrainedStreamsLeaveTheRegistry(t *testing.T) {
	for _, cl := range testkit.OneRedisAndCluster(t) {
		t.Run(cl.Name, func(t *testing.T) {
			ctx := t.Context()
			rdb := cl.RDB
			name := fmt.Sprint("drain-", rand.Int64())
			t.Cleanup(func() { rdb.Del(context.Background(), stock.StreamsKey+":"+name) })
			s := stock.NewStore(rdb, nil).ForDeployment(name)
			q := NewRedisStreams(s.Queue())
			p := streamProduct(t, rdb, 2)
			if err := s.LayOut(ctx, p, []int{5, 5}, 10); err != nil {
				t.Fatal(err)
			}
			take := func(user int64) idgen.ID {
				t.Helper()
				id := idgen.ID(1<<53 + rand.Int64N(1<<50))
				if _, err := s.Take(ctx, stock.Request{Product: p, Taker: stock.Async{},
					Ticket: stock.Ticket{User: user, Order: id, Key: "k"}}); err != nil {
					t.Fatalf("buyer %d: %v", user, err)
				}
				return id
			}
			drain := func() []idgen.ID {
				t.Helper()
				streams, err := q.Streams(ctx)
				if err != nil {
					t.Fatal(err)
				}
				good, bad, err := q.Read(ctx, "c", streams, 100, 50*time.Millisecond)
				if err != nil || len(bad) > 0 {
					t.Fatalf("reading: %v, %d malformed", err, len(bad))
				}
				if err := q.Ack(ctx, good); err != nil {
					t.Fatal(err)
				}
				var ids []idgen.ID
				for _, o := range good {
					ids = append(ids, o.Order)
				}
				return ids
			}
			for user := range int64(4) {
				take(user + 1)
			}
			if streams, _ := q.Streams(ctx); len(streams) != 2 {
				t.Fatalf("registered %v, want the product's 2 streams", streams)
			}
			if got := drain(); len(got) != 4 {
				t.Fatalf("read %d orders, want 4", len(got))
			}
			if cl.Cluster {
				if n, err := q.ForgetDrained(ctx); err != nil || n != 0 {
					t.Errorf("dropped %d streams that took an order just now (%v), want none before the idle time", n, err)
				}
				q.DrainIdle(0)
			}
			if n, err := q.ForgetDrained(ctx); err != nil || n != 2 {
				t.Fatalf("dropped %d drained streams, %v; want 2", n, err)
			}
			if streams, _ := q.Streams(ctx); len(streams) != 0 {
				t.Errorf("the registry still holds %v", streams)
			}
			for shard := range 2 {
				if n, _ := rdb.Exists(ctx, p.StreamKey(shard), p.ShardPendingKey(shard)).Result(); n != 0 {
					t.Errorf("shard %d's stream or pending index outlived the close", shard)
				}
			}
			id := take(9)
			if got := drain(); len(got) != 1 || got[0] != id {
				t.Errorf("after the close, read %v; want the new order %s", got, id)
			}
		})
	}
}

// The registry's protocol holds under a race: buyers take in waves while a
// consumer reads and acknowledges and a closer drops every drained stream
// as fast as it can (no idle time); the buyers' enrolments and the
// closer's drops are held a moment each (testkit.SlowRegistry), so that they
// cross. At the end every order taken was read, by the consumer or by a
// last read of the registered streams: none sat in a stream the registry
// had lost. A closer this fast may turn a take back maxReopens times (each
// close of a stream not opened yet moves its generation on): the take
// gives up, having taken nothing, and says so. Those are counted, and must
// stay rare.
func TestNoOrderLeftOutsideTheRegistry(t *testing.T) {
	c := testkit.NewRedisCluster(t)
	ctx := t.Context()
	name := fmt.Sprint("race-", rand.Int64())
	t.Cleanup(func() { c.Client.Del(context.Background(), stock.StreamsKey+":"+name) })
	slow := func() *stock.Store {
		rdb := c.NewClient(t, nil)
		rdb.AddHook(testkit.SlowRegistry{Prefix: stock.StreamsKey, Most: 3 * time.Millisecond})
		return stock.NewStore(rdb, nil).ForDeployment(name)
	}
	s, closer := slow(), NewRedisStreams(slow().Queue()).DrainIdle(0)
	q := NewRedisStreams(stock.NewStore(c.Client, nil).ForDeployment(name).Queue())
	p := streamProduct(t, c.Client, 3)
	const waves, buyers = 15, 20
	if err := s.LayOut(ctx, p, []int{100, 100, 100}, 300); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	read := map[idgen.ID]bool{}
	consume := func(block time.Duration) (int, error) {
		streams, err := q.Streams(ctx)
		if err != nil {
			return 0, err
		}
		good, _, err := q.Read(ctx, "c", streams, 100, block)
		if err != nil {
			return 0, err
		}
		mu.Lock()
		for _, o := range good {
			read[o.Order] = true
		}
		mu.Unlock()
		return len(good), q.Ack(ctx, good)
	}
	var closes, failures int
	stop := testkit.Loops(func() {
		if _, err := consume(5 * time.Millisecond); err != nil {
			failures++
			t.Logf("consumer: %v", err)
		}
	}, func() {
		n, err := closer.ForgetDrained(ctx)
		if err != nil {
			t.Errorf("closer: %v", err)
		}
		closes += n
		time.Sleep(time.Millisecond)
	})
	var taken []idgen.ID
	gaveUp := 0
	for w := range waves {
		gate := make(chan struct{})
		var wg sync.WaitGroup
		for b := range buyers {
			wg.Go(func() {
				<-gate
				id := idgen.ID(1<<53 + rand.Int64N(1<<50))
				user := int64(w*buyers + b + 1)
				_, err := s.Take(ctx, stock.Request{Product: p, Taker: stock.Async{}, Ticket: stock.Ticket{User: user, Order: id, Key: "k"}})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					taken = append(taken, id)
				case errors.Is(err, stock.ErrSoldOut):
				case strings.Contains(err.Error(), "was closed"):
					gaveUp++
				default:
					t.Errorf("buyer %d: %v", user, err)
				}
			})
		}
		close(gate)
		wg.Wait()
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	missing := testkit.Missed(t, taken, read, func() (int, error) { return consume(50 * time.Millisecond) })
	t.Logf("%d taken, %d read, %d gave up, %d stream closes, %d consumer errors", len(taken), len(read), gaveUp, closes, failures)
	if missing > 0 {
		t.Errorf("%d of %d orders taken were never read from a registered stream", missing, len(taken))
	}
	if len(taken)+gaveUp != waves*buyers || gaveUp > waves*buyers/10 {
		t.Errorf("%d taken and %d gave up of %d buyers; want every buyer served, at most a tenth turned back", len(taken), gaveUp, waves*buyers)
	}
	if closes == 0 {
		t.Error("the closer closed no stream: the race was not run")
	}
}

// A stream whose enrolment was lost holds orders no consumer reads, and a
// take enrols a stream only when it finds it closed: the reconciler enrols
// the streams of the takes it finds queued past the grace (EnrolQueued),
// and a consumer adopts the streams an earlier version listed in its set
// (AdoptOldRegistry). Both leave closed streams out. An order an earlier
// version queued on a cluster, indexed by day, counts as queued.
func TestLostEnrolmentsAreFound(t *testing.T) {
	c := testkit.NewRedisCluster(t)
	ctx := t.Context()
	name := fmt.Sprint("lost-", rand.Int64())
	registry, old := stock.StreamsKey+":"+name, stock.OldStreamsKey+":"+name
	t.Cleanup(func() { c.Client.Del(context.Background(), registry, old) })
	s := stock.NewStore(c.Client, nil).ForDeployment(name)
	q := s.Queue()
	p := streamProduct(t, c.Client, 3)
	if err := s.LayOut(ctx, p, []int{5, 5, 5}, 15); err != nil {
		t.Fatal(err)
	}
	var taken []stock.Entry
	for user := range int64(2) { // two shards; the third's stream is never opened
		tk, err := s.Take(ctx, stock.Request{Product: p, Taker: stock.Async{},
			Ticket: stock.Ticket{User: user + 1, Order: idgen.ID(1<<53 + rand.Int64N(1<<50)), Key: "k"}})
		if err != nil {
			t.Fatal(err)
		}
		taken = append(taken, tk.Entry)
	}
	registered := func() []string {
		t.Helper()
		streams, err := q.Streams(ctx)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(streams)
		return streams
	}
	want := []string{p.StreamKey(taken[0].Shard), p.StreamKey(taken[1].Shard)}
	slices.Sort(want)
	closed := 0 + 1 + 2 - taken[0].Shard - taken[1].Shard

	c.Client.Del(ctx, registry) // the enrolments lost
	if err := q.EnrolQueued(ctx, p.Layout, []int{0, 1, 2}); err != nil {
		t.Fatal(err)
	}
	if got := registered(); !slices.Equal(got, want) {
		t.Errorf("after EnrolQueued the registry holds %v, want the open streams %v", got, want)
	}

	c.Client.Del(ctx, registry)
	c.Client.SAdd(ctx, old, want[0], want[1], p.StreamKey(closed))
	if err := NewRedisStreams(q).AdoptOldRegistry(ctx); err != nil {
		t.Fatal(err)
	}
	if got := registered(); !slices.Equal(got, want) {
		t.Errorf("after adopting the old set the registry holds %v, want the open streams %v", got, want)
	}
	if n, _ := c.Client.Exists(ctx, old).Result(); n != 0 {
		t.Error("the old set outlived its adoption")
	}

	earlier := stock.Entry{Order: idgen.ID(1<<53 + rand.Int64N(1<<50)), Shard: closed, User: 99}
	day := stock.PendingKey(earlier.Order.Time())
	c.Client.HSet(ctx, day, earlier.Order.String(), fmt.Sprintf("%d %d 99 0", p.ID, closed))
	t.Cleanup(func() { c.Client.HDel(context.Background(), day, earlier.Order.String()) })
	queued, err := q.PendingAmong(ctx, p.Layout, append(taken, earlier))
	if err != nil {
		t.Fatal(err)
	}
	if !queued[taken[0].Order] || !queued[taken[1].Order] || !queued[earlier.Order] {
		t.Errorf("queued %v; want both takes and the order indexed by day", queued)
	}
}
