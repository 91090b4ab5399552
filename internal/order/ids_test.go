package order_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"seckill/internal/api"
	"seckill/internal/catalogue"
	"seckill/internal/lock"
	"seckill/internal/order"
	"seckill/internal/reconcile"
	"seckill/internal/testkit"
	"seckill/internal/testkit/testenv"
)

// No purchase touches the order ids' day key (ids:order:<day>), in any
// mode, first tries and retries alike, on one Redis and on a cluster: the
// ids are drawn from segments reserved in SQL (idgen.Segments). Every
// command the service sends is watched for a key of the ids, and after the
// purchases no such key exists on any master (a script that drew an id
// would have written one, whatever its arguments named). A retry with the
// same key is told the first try's order.
func TestNoPurchaseTouchesTheOrderIDKey(t *testing.T) {
	modes := []string{api.ModeLua, api.ModeRMW, api.ModeAsync, api.ModeDB}
	t.Run("redis", func(t *testing.T) {
		for _, mode := range modes {
			t.Run(mode, func(t *testing.T) {
				f := newFixture(t, order.Options{})
				watch := watchIDKeys(f.rdb)
				buyTwiceEach(t, f.svc, mode)
				watch.check(t)
				if keys := f.mr.Keys(); hasIDKey(keys) {
					t.Errorf("keys after the purchases: %v; want no ids:* key", keys)
				}
			})
		}
	})
	t.Run("cluster", func(t *testing.T) {
		c := testkit.NewRedisCluster(t)
		for _, mode := range modes[:3] { // the db mode keeps its stock in SQL
			t.Run(mode, func(t *testing.T) {
				_, db, _ := testenv.Local(t)
				locks, err := lock.OpenPool(t.Context(), lock.PoolConfig{Redis: c.Client})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { locks.Close() })
				svc, _ := testenv.Orders(t, db, c.Client, locks, order.Options{}, reconcile.Options{})
				watch := watchIDKeys(c.Client)
				buyTwiceEach(t, svc, mode)
				watch.check(t)
				if c.Kind() == testkit.RedisExternal {
					return // other clients may draw ids there
				}
				err = c.Client.ForEachMaster(t.Context(), func(ctx context.Context, m *redis.Client) error {
					keys, err := m.Keys(ctx, "ids:*").Result()
					if err == nil && len(keys) > 0 {
						t.Errorf("master %s holds %v after the purchases", m.Options().Addr, keys)
					}
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
			})
		}
	})
}

// buyTwiceEach has five buyers each buy a unit of a new product sold in
// mode, and retry with the same key.
func buyTwiceEach(t *testing.T, svc *order.Service, mode string) {
	t.Helper()
	id := testenv.ProductID(t)
	// A test cluster keeps nothing: only a lab product may be async on it.
	spec := catalogue.ProductSpec{ID: id, Stock: 10, Shards: 2, Lock: "token", Mode: mode, Lab: true}
	if _, err := svc.Catalogue().Reset(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	for user := range int64(5) {
		in := order.Purchase{UserID: user + 1, ProductID: id, Key: "k"}
		first, _, err := svc.Buy(t.Context(), in)
		if err != nil {
			t.Fatalf("buyer %d: %v", user+1, err)
		}
		again, _, err := svc.Buy(t.Context(), in)
		if err != nil || again.ID != first.ID {
			t.Errorf("buyer %d's retry: order %s, %v; want %s", user+1, again.ID, err, first.ID)
		}
	}
}

// idKeyWatch records the commands sent through a client that name a key
// of the order ids.
type idKeyWatch struct {
	mu   sync.Mutex
	seen []string
}

func watchIDKeys(rdb interface{ AddHook(redis.Hook) }) *idKeyWatch {
	w := new(idKeyWatch)
	rdb.AddHook(w)
	return w
}

func (w *idKeyWatch) note(cmd redis.Cmder) {
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok && strings.HasPrefix(s, "ids:") {
			w.mu.Lock()
			w.seen = append(w.seen, cmd.String())
			w.mu.Unlock()
			return
		}
	}
}

func (w *idKeyWatch) DialHook(next redis.DialHook) redis.DialHook { return next }

func (w *idKeyWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		w.note(cmd)
		return next(ctx, cmd)
	}
}

func (w *idKeyWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			w.note(cmd)
		}
		return next(ctx, cmds)
	}
}

func (w *idKeyWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.seen) > 0 {
		t.Errorf("%d commands named an ids key, the first %s", len(w.seen), w.seen[0])
	}
}

func hasIDKey(keys []string) bool {
	for _, k := range keys {
		if strings.HasPrefix(k, "ids:") {
			return true
		}
	}
	return false
}
