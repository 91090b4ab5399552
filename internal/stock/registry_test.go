package stock_test

import (
	"context"
	"errors"
	"fmt"
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
	"seckill/internal/testkit"
)

// keyRecorder is a client hook that keeps the name and keys of every
// command sent, pipelined or not.
type keyRecorder struct {
	mu   sync.Mutex
	cmds []recorded
}

type recorded struct {
	name string
	keys []string
}

func (r *keyRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *keyRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		r.add(cmd)
		return err
	}
}

func (r *keyRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			r.add(c)
		}
		return err
	}
}

// add records cmd, unless Redis did not know its script: the client sends
// it again in full, and the second is the command that ran.
func (r *keyRecorder) add(cmd redis.Cmder) {
	if err := cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		return
	}
	args := cmd.Args()
	rec := recorded{name: strings.ToLower(cmd.Name())}
	switch rec.name {
	case "evalsha", "eval", "evalsha_ro", "eval_ro":
		n, _ := strconv.Atoi(fmt.Sprint(args[2]))
		for _, k := range args[3 : 3+n] {
			rec.keys = append(rec.keys, fmt.Sprint(k))
		}
	default:
		if len(args) > 1 {
			rec.keys = []string{fmt.Sprint(args[1])}
		}
	}
	r.mu.Lock()
	r.cmds = append(r.cmds, rec)
	r.mu.Unlock()
}

func (r *keyRecorder) take() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.cmds
	r.cmds = nil
	return out
}

// On a Redis Cluster an async purchase is two scripts: the buyer's claim,
// and one script in the shard's slot that takes, records, queues and
// indexes the order; the claim names the order and stands as the buyer's
// record. Nothing it sends touches a key every purchase shares (the
// registry of streams, a day's pending index): such a key is one hot
// master. Only the first take of a closed stream enrols it, once. The
// buyer's next purchase is told of the first take at once.
func TestAsyncTakeOnAClusterIsOneScript(t *testing.T) {
	c := testkit.NewRedisCluster(t)
	rec := &keyRecorder{}
	rdb := c.NewClient(t, nil)
	rdb.AddHook(rec)
	s := stock.NewStore(rdb, nil)
	p := clusterProduct(t, rdb, 5)
	ctx := t.Context()
	if err := s.LayOut(ctx, p, []int{20, 20, 20, 20, 20}, 100); err != nil {
		t.Fatal(err)
	}
	buy := func(user int64, key string) (stock.Taken, error) {
		return s.Take(ctx, stock.Request{Product: p, Taker: stock.Async{},
			Ticket: stock.Ticket{User: user, Order: idgen.ID(rand.Int64N(1 << 50)), Key: key}})
	}
	take := func(user int64) {
		t.Helper()
		if _, err := buy(user, "k"+strconv.FormatInt(user, 10)); err != nil {
			t.Fatalf("buyer %d: %v", user, err)
		}
	}
	rec.take()
	for user := range int64(5) {
		take(user + 1)
	}
	enrolled := 0
	for _, c := range rec.take() {
		if len(c.keys) == 1 && c.keys[0] == stock.StreamsKey {
			enrolled++
		}
	}
	if enrolled != 5 {
		t.Errorf("the first take of each of 5 shards enrolled %d streams, want 5", enrolled)
	}

	const n = 20
	for user := range int64(n) {
		take(100 + user)
	}
	cmds := rec.take()
	if len(cmds) != 2*n {
		t.Errorf("%d purchases sent %d commands, want %d (claim, take): %v", n, len(cmds), 2*n, cmds)
	}
	for _, c := range cmds {
		if !strings.HasPrefix(c.name, "eval") {
			t.Errorf("a purchase sent %s %v, not a script", c.name, c.keys)
		}
		for _, k := range c.keys {
			if slot(k) != slot(c.keys[0]) {
				t.Errorf("%s spans slots: %v", c.name, c.keys)
			}
			if k == stock.StreamsKey || strings.HasPrefix(k, "seckill:pending:2") {
				t.Errorf("a purchase touched %s, a key every purchase shares", k)
			}
		}
	}

	first, err := buy(1000, "first")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = buy(1000, "second")
	var before *stock.TakenBefore
	if !errors.As(err, &before) || before.Prior.Order != first.Order {
		t.Fatalf("the buyer's second purchase: %v; want TakenBefore with order %s", err, first.Order)
	}
	if waited := time.Since(start); waited > 500*time.Millisecond {
		t.Errorf("the second purchase waited %v for the first's claim, which had taken", waited)
	}
	if got := rdb.Get(ctx, p.BuyerKey(1000)).Val(); !strings.HasPrefix(got, first.Order.String()+" ") {
		t.Errorf("the buyer's key holds %q after the second purchase, want the first take's record", got)
	}
}

// A drained stream leaves the consumers' registry, with its pending index,
// on one Redis at once and on a cluster once it took nothing for the drain
// idle time; the next take opens and enrols it again, and its order is
// read.
func TestDrainedStreamsLeaveTheRegistry(t *testing.T) {
	for _, cl := range oneRedisAndCluster(t) {
		t.Run(cl.name, func(t *testing.T) {
			ctx := t.Context()
			rdb := cl.rdb
			name := fmt.Sprint("drain-", rand.Int64())
			t.Cleanup(func() { rdb.Del(context.Background(), stock.StreamsKey+":"+name) })
			s := stock.NewStore(rdb, nil).ForDeployment(name)
			q := s.Queue()
			p := clusterProduct(t, rdb, 2)
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
			if cl.cluster {
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
// closer's drops are held a moment each (slowRegistry), so that they
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
		rdb.AddHook(slowRegistry{prefix: stock.StreamsKey, most: 3 * time.Millisecond})
		return stock.NewStore(rdb, nil).ForDeployment(name)
	}
	s, closer := slow(), slow().Queue().DrainIdle(0)
	q := stock.NewStore(c.Client, nil).ForDeployment(name).Queue()
	p := clusterProduct(t, c.Client, 3)
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
	stop := loops(func() {
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
	missing := missed(t, taken, read, func() (int, error) { return consume(50 * time.Millisecond) })
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

// redisUnderTest is a Redis a test runs on: one server, or a cluster.
type redisUnderTest struct {
	name    string
	rdb     redis.UniversalClient
	cluster bool
}

// oneRedisAndCluster are the shared Redis and a cluster of the test's own.
func oneRedisAndCluster(t *testing.T) []redisUnderTest {
	one := redis.NewClient(&redis.Options{Addr: testkit.RealRedis(t).Addr()})
	t.Cleanup(func() { one.Close() })
	return []redisUnderTest{{"one Redis", one, false}, {"cluster", testkit.NewRedisCluster(t).Client, true}}
}

// loops runs each step in the background, again and again, until the stop
// it returns is called; stop waits for the steps to end.
func loops(steps ...func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, step := range steps {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
					step()
				}
			}
		})
	}
	return func() { close(done); wg.Wait() }
}

// missed runs last until it finds nothing more, and then counts the ids
// that are not in seen.
func missed(t *testing.T, ids []idgen.ID, seen map[idgen.ID]bool, last func() (int, error)) int {
	t.Helper()
	for {
		n, err := last()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	missing := 0
	for _, id := range ids {
		if !seen[id] {
			missing++
		}
	}
	return missing
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
	p := clusterProduct(t, c.Client, 3)
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
	if err := q.AdoptOldRegistry(ctx); err != nil {
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
