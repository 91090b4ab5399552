package order_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"seckill/internal/catalogue"
	"seckill/internal/lock"
	"seckill/internal/order"
	"seckill/internal/stock"
	"seckill/internal/testkit/testenv"
)

// changedRedis is a reconciler that sees the product's Redis change during
// every purchase (a failover, a master taking back over): each take may
// have taken a unit that a take the server forgot still holds, and goes
// back.
type changedRedis struct{}

func (changedRedis) Touch(int64)                                        {}
func (changedRedis) AwaitRepair(context.Context, int64) (uint64, error) { return 0, nil }
func (changedRedis) ChangedSince(uint64) bool                           { return true }

// scriptsAfterTake is a client hook that, once armed, lets the first script
// that succeeds run (the take) and fails every script after it (the
// give-back), as a node lost in the change would.
type scriptsAfterTake struct {
	armed, took atomic.Bool
}

var errNodeLost = errors.New("the test's hook: the node is gone")

func (h *scriptsAfterTake) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptsAfterTake) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *scriptsAfterTake) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); !h.armed.Load() || n != "evalsha" && n != "eval" {
			return next(ctx, cmd)
		}
		if h.took.Load() {
			cmd.SetErr(errNodeLost)
			return errNodeLost
		}
		err := next(ctx, cmd)
		h.took.Store(err == nil)
		return err
	}
}

// A purchase whose Redis changed during its take gives the unit back and is
// told rebuilding, which says nothing was sold, only when the give-back
// happened; when it failed, the take stands with its order id and the
// buyer is told outcome_unknown with that id, its order marked unsettled
// so that the reconciler returns the unit without the grace (issue 37).
func TestRebuildingOnlyWhenNothingWasTaken(t *testing.T) {
	for _, tc := range []struct {
		name     string
		giveBack bool
	}{{"given back", true}, {"give-back failed", false}} {
		t.Run(tc.name, func(t *testing.T) {
			rdb, db, _ := testenv.Local(t)
			locks, err := lock.OpenPool(t.Context(), lock.PoolConfig{Redis: rdb})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { locks.Close() })
			svc, err := order.NewService(db, rdb, locks, order.Options{Repairs: changedRedis{}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { svc.Close() })
			id := testenv.ProductID(t)
			p, err := svc.Catalogue().Reset(t.Context(), catalogue.ProductSpec{ID: id, Stock: 3, Shards: 1, Mode: "lua"})
			if err != nil {
				t.Fatal(err)
			}
			hook := new(scriptsAfterTake)
			rdb.AddHook(hook)
			hook.armed.Store(!tc.giveBack)
			_, rc, err := svc.Buy(t.Context(), order.Purchase{UserID: 7, ProductID: id})

			ledgers := stock.NewStore(rdb, db).Ledgers()
			l := p.Stock().Layout
			takes, lerr := ledgers.Ledger(t.Context(), l)
			if lerr != nil {
				t.Fatal(lerr)
			}
			take, stands := takes[7]
			var unsettled *order.UnsettledError
			switch {
			case stands && !errors.As(err, &unsettled):
				t.Fatalf("the take of order %s stands, and the buyer was told %v; want outcome unknown with the order id", take.Order, err)
			case stands && unsettled.Order != take.Order:
				t.Fatalf("told order %s unsettled; the take that stands is %s's", unsettled.Order, take.Order)
			case !stands && !errors.Is(err, order.ErrRebuilding):
				t.Fatalf("nothing was taken (given back), and the buyer was told %v; want rebuilding", err)
			}
			if stands != !tc.giveBack {
				t.Fatalf("the take stands: %v; the give-back failed: %v", stands, !tc.giveBack)
			}
			if stands {
				marked, err := ledgers.Unsettled(t.Context(), l)
				if err != nil || !marked[rc.Order] {
					t.Errorf("order %s marked unsettled: %v (%v); want marked", rc.Order, marked[rc.Order], err)
				}
			}
		})
	}
}
