package stock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
