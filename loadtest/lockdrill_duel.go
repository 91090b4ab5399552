package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/api"
	"seckill/internal/idgen"
	"seckill/internal/lock"
	"seckill/internal/order"
	"seckill/internal/stock"
)

// duel is the shape the failover and etcd drills share: one unit of stock,
// two holders. A takes the shard's lock and reads; the fault strikes while
// A holds its read; B tries to take the unit; A writes what it read.
type duel struct {
	store *redis.Client
	s     *stock.Store
	p     stock.Product
	aRead *readHook
}

// newDuel lays out one unit on the store at addr.
func newDuel(ctx context.Context, addr string) (*duel, error) {
	store := redis.NewClient(&redis.Options{Addr: addr, DialerRetries: 1})
	d := &duel{store: store, s: stock.NewStore(store, nil), aRead: &readHook{read: make(chan struct{})},
		p: stock.Product{Layout: stock.Layout{ID: time.Now().UnixNano(), Shards: 1, Epoch: 1}, Where: stock.InRedis}}
	store.AddHook(d.aRead)
	if err := d.s.LayOut(ctx, d.p, []int{1}, 1); err != nil {
		store.Close()
		return nil, err
	}
	return d, nil
}

func (d *duel) Close() {
	purge(d.store, d.p)
	d.store.Close()
}

// hand is how one holder takes.
type hand struct {
	locker  lock.Locker
	opt     lock.Options
	hold    time.Duration // between A's read and its write
	abandon bool          // stop the lease's renewal first, as a paused process's stops
}

type taken struct {
	t   stock.Taken
	err error
	at  time.Time // when the take returned
}

func (d *duel) take(ctx context.Context, user int64, h hand) taken {
	t, err := d.s.Take(ctx, stock.Request{Product: d.p, Taker: stock.RMW{Locked: stock.Locked{Locker: h.locker, Lock: h.opt}}, Hooks: order.Faults{Hold: h.hold, Abandon: h.abandon}.Hooks(),
		Ticket: stock.Ticket{User: user, Order: idgen.ID(1000 + user), Key: fmt.Sprint("drill-", user)}})
	return taken{t: t, err: err, at: time.Now()}
}

// startA starts A's take and returns once A has read the stock (true) or
// its take has ended before that, refused (false, with A's result).
func (d *duel) startA(ctx context.Context, h hand) (<-chan taken, bool, error) {
	done := make(chan taken, 1)
	go func() { done <- d.take(context.WithValue(ctx, holderA{}, true), 1, h) }()
	select {
	case <-d.aRead.read:
		return done, true, nil
	case a := <-done:
		if a.err == nil {
			return nil, false, errors.New("A's take ended before it read the stock, and sold")
		}
		done <- a
		return done, false, nil
	case <-time.After(10 * time.Second):
		return nil, false, errors.New("A did not read the stock within 10s")
	}
}

// judge fills out's verdict from the two takes, and fails on an error that
// is neither a refusal nor a sold-out.
func judge(out *Outcome, a, b taken) error {
	for _, t := range []taken{a, b} {
		switch {
		case t.err == nil:
			out.Sold++
		case errors.Is(t.err, stock.ErrLockTimeout), errors.Is(t.err, stock.ErrLeaseLost), errors.Is(t.err, stock.ErrSoldOut):
		default:
			return t.err
		}
	}
	out.Verdict = api.VerdictOK
	if out.Sold > out.Initial {
		out.Verdict = api.VerdictOversold
	}
	return nil
}

// said describes a take for a row's detail.
func said(t taken) string {
	if errors.Is(t.err, stock.ErrSoldOut) {
		return "found it sold out"
	}
	return outcome(t.err, t.t)
}
