package stock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"seckill/internal/idgen"
	"seckill/internal/lock"
	"seckill/internal/stock"
	"seckill/internal/testkit/testenv"
)

// fixture is a store on miniredis and an in-memory SQLite: what is tested
// here is the store's own logic, not the servers'.
type fixture struct {
	t   *testing.T
	s   *stock.Store
	rdb *redis.Client
	db  *gorm.DB
	mr  *miniredis.Miniredis
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	rdb, db, mr := testenv.Local(t)
	return &fixture{t: t, s: stock.NewStore(rdb, db), rdb: rdb, db: db, mr: mr}
}

// layOut lays out levels for p, in Redis or in SQL as p says.
func (f *fixture) layOut(p stock.Product, levels ...int) {
	f.t.Helper()
	total := 0
	for _, n := range levels {
		total += n
	}
	if err := f.s.LayOut(f.t.Context(), p, levels, total); err != nil {
		f.t.Fatal(err)
	}
	if err := stock.LayOutSQL(f.db, p, levels); err != nil {
		f.t.Fatal(err)
	}
}

// take takes a unit for user, in a transaction of its own for the db mode.
func (f *fixture) take(r stock.Request, user int64) (stock.Taken, error) {
	r.Ticket = ticket(user)
	if r.Taker.Where() != stock.InSQL {
		return f.s.Take(f.t.Context(), r)
	}
	var taken stock.Taken
	err := f.db.Transaction(func(tx *gorm.DB) error {
		r.Taker = inTx(r.Taker, tx)
		var err error
		taken, err = f.s.Take(f.t.Context(), r)
		return err
	})
	// sqlrmw's lock is held until the COMMIT, and released after it.
	if _, rerr := taken.Held.Release(f.t.Context()); rerr != nil {
		f.t.Fatal(rerr)
	}
	return taken, err
}

// inTx is tk taking in tx, for the takers that take in SQL.
func inTx(tk stock.Taker, tx *gorm.DB) stock.Taker {
	switch tk := tk.(type) {
	case stock.DB:
		tk.Tx = tx
		return tk
	case stock.SQLRMW:
		tk.Tx = tx
		return tk
	}
	return tk
}

// takers are every taker, named by the sale mode that uses it, the locked
// ones under a lock of this process.
func takers() []struct {
	name  string
	taker stock.Taker
} {
	locked := stock.Locked{Locker: lock.NewLocal()}
	return []struct {
		name  string
		taker stock.Taker
	}{
		{"rmw", stock.RMW{Locked: locked}}, {"lua", stock.Lua{}}, {"db", stock.DB{}},
		{"sqlrmw", stock.SQLRMW{Locked: locked}}, {"async", stock.Async{}}, {"mq", stock.Lua{Published: true}},
	}
}

func ticket(user int64) stock.Ticket {
	return stock.Ticket{User: user, Order: idgen.ID(1000 + user), Key: "key-" + string(rune('a'+user%26))}
}

func (f *fixture) levels(p stock.Product) []int {
	f.t.Helper()
	l, err := f.s.Ledgers().Levels(f.t.Context(), p)
	if err != nil {
		f.t.Fatal(err)
	}
	return l
}

func product(shards int, where stock.Where) stock.Product {
	return stock.Product{Layout: stock.Layout{ID: 1, Shards: shards, Epoch: 1}, Where: where, Fallback: true}
}

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		total, n int
		want     []int
	}{
		{7, 5, []int{2, 2, 1, 1, 1}},
		{10, 5, []int{2, 2, 2, 2, 2}},
		{3, 5, []int{1, 1, 1, 0, 0}},
		{0, 2, []int{0, 0}},
		{9, 1, []int{9}},
	} {
		if diff := cmp.Diff(tc.want, stock.Split(tc.total, tc.n)); diff != "" {
			t.Errorf("Split(%d, %d) (-want +got):\n%s", tc.total, tc.n, diff)
		}
	}
}

// A shard's keys share one hash tag, so that one script may touch them on
// a cluster; the layout's epoch keeps layouts apart; the lock outlives
// layouts; a buyer's key is in a slot of its own.
func TestKeys(t *testing.T) {
	l := stock.Layout{ID: 42, Shards: 5, Epoch: 7}
	got := []string{l.StockKey(3), l.FenceKey(3), l.LedgerKey(3), l.LockKey(3), l.BuyerKey(9)}
	want := []string{"seckill:stock:{42_3}:7", "seckill:stock:{42_3}:7:fence", "seckill:taken:{42_3}:7",
		"seckill:lock:{42_3}", "seckill:buyer:{42:9}:7"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("keys (-want +got):\n%s", diff)
	}
}

func TestTakeEveryUnitThenSoldOut(t *testing.T) {
	for _, tk := range takers() {
		t.Run(tk.name, func(t *testing.T) {
			f := newFixture(t)
			p := product(5, tk.taker.Where())
			f.layOut(p, stock.Split(7, 5)...)
			r := stock.Request{Product: p, Taker: tk.taker}
			var last stock.Taken
			for u := int64(1); u <= 7; u++ {
				tk, err := f.take(r, u)
				if err != nil {
					t.Fatalf("buyer %d: %v", u, err)
				}
				last = tk
			}
			if _, err := f.take(r, 8); !errors.Is(err, stock.ErrSoldOut) {
				t.Fatalf("eighth buyer: %v, want ErrSoldOut", err)
			}
			if !f.s.Flags().SoldOut(p.ID) {
				t.Error("the sold-out flag is not set after every shard was found empty")
			}
			if diff := cmp.Diff([]int{0, 0, 0, 0, 0}, f.levels(p)); diff != "" {
				t.Errorf("levels after selling out (-want +got):\n%s", diff)
			}
			if tk.taker.Where() == stock.InSQL {
				return // its takes roll back with their transaction: nothing to give back
			}
			// A unit given back is in its shard again and can be sold.
			r.Ticket = ticket(7)
			r.Ticket.Order = last.Order // the async take's is the one its script drew
			if back, err := f.s.GiveBack(t.Context(), r, last); err != nil || !back {
				t.Fatalf("give-back: %v, %v", back, err)
			}
			if f.s.Flags().SoldOut(p.ID) {
				t.Error("the sold-out flag survived a unit given back")
			}
			if got := f.levels(p)[last.Shard]; got != 1 {
				t.Errorf("shard %d holds %d, want the unit back", last.Shard, got)
			}
			if _, err := f.take(r, 7); err != nil {
				t.Errorf("buying the unit given back: %v", err)
			}
		})
	}
}

func TestWithoutFallbackOnlyThePickedShard(t *testing.T) {
	f := newFixture(t)
	p := product(2, stock.InRedis)
	p.Fallback = false
	f.layOut(p, 1, 0) // shard 0 holds the only unit
	var soldOut int
	for u := int64(1); u <= 2; u++ {
		_, err := f.take(stock.Request{Product: p, Taker: stock.Lua{}}, u)
		if errors.Is(err, stock.ErrSoldOut) {
			soldOut++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if soldOut != 1 || f.s.Flags().SoldOut(p.ID) {
		t.Errorf("%d buyers told sold out, flag %v: want one refusal from the empty shard and no flag", soldOut, f.s.Flags().SoldOut(p.ID))
	}
}

// One unit per buyer, in every Redis mode: a second take of the same buyer
// takes nothing and returns the record of the first, whichever shard it
// tries; the record names the first take's order, key and shard.
func TestSecondTakeReturnsTheFirst(t *testing.T) {
	for _, tk := range []stock.Taker{stock.Lua{}, stock.RMW{Locked: stock.Locked{Locker: lock.NewLocal()}}} {
		t.Run(fmt.Sprintf("%T", tk), func(t *testing.T) {
			f := newFixture(t)
			p := product(3, stock.InRedis)
			f.layOut(p, 5, 5, 5)
			r := stock.Request{Product: p, Taker: tk}
			first, err := f.take(r, 9)
			if err != nil {
				t.Fatal(err)
			}
			for range 3 { // every shard in turn
				r.Ticket = stock.Ticket{User: 9, Order: 77, Key: "another"}
				_, err := f.s.Take(t.Context(), r)
				var before *stock.TakenBefore
				if !errors.As(err, &before) || !errors.Is(err, stock.ErrAlreadyBought) {
					t.Fatalf("second take: %v, want a *TakenBefore", err)
				}
				if before.Prior.Order != first.Order || before.Prior.Key != first.Key || before.Prior.Shard != first.Shard {
					t.Errorf("the record %+v, want the first take's %+v", before.Prior, first.Entry)
				}
			}
			if got := f.levels(p); got[0]+got[1]+got[2] != 14 {
				t.Errorf("levels %v: want one unit taken", got)
			}
			// The give-back forgets the buyer, who may buy again.
			r.Ticket = ticket(9)
			if _, err := f.s.GiveBack(t.Context(), r, first); err != nil {
				t.Fatal(err)
			}
			if _, err := f.take(r, 9); err != nil {
				t.Errorf("after the give-back: %v", err)
			}
		})
	}
}

// A give-back runs at most once per take: the purchase and the reconciler
// may both try, and a retried script may run twice.
func TestGiveBackIsIdempotent(t *testing.T) {
	f := newFixture(t)
	p := product(1, stock.InRedis)
	f.layOut(p, 3)
	r := stock.Request{Product: p, Taker: stock.Lua{}}
	tk, err := f.take(r, 1)
	if err != nil {
		t.Fatal(err)
	}
	r.Ticket = ticket(1)
	for i, want := range []bool{true, false, false} {
		back, err := f.s.GiveBack(t.Context(), r, tk)
		if err != nil || back != want {
			t.Errorf("give-back %d: %v, %v; want %v", i+1, back, err, want)
		}
	}
	if got := f.levels(p)[0]; got != 3 {
		t.Errorf("stock %d after three give-backs of one unit, want 3", got)
	}
	// A give-back that names another order returns nothing.
	if _, err := f.take(r, 1); err != nil {
		t.Fatal(err)
	}
	r.Ticket.Order = 999
	if back, _ := f.s.GiveBack(t.Context(), r, tk); back {
		t.Error("a give-back for another order returned the buyer's unit")
	}
}

// The ledger holds every take with its record; a layout's keys are its own.
func TestLedgerAndDrop(t *testing.T) {
	f := newFixture(t)
	p := product(2, stock.InRedis)
	f.layOut(p, 2, 2)
	r := stock.Request{Product: p, Taker: stock.Lua{}}
	for u := int64(1); u <= 3; u++ {
		if _, err := f.take(r, u); err != nil {
			t.Fatal(err)
		}
	}
	ledger, err := f.s.Ledgers().Ledger(t.Context(), p.Layout)
	if err != nil {
		t.Fatal(err)
	}
	if len(ledger) != 3 || ledger[2].Order != ticket(2).Order || ledger[2].Key != ticket(2).Key {
		t.Fatalf("ledger %+v: want three takes with their records", ledger)
	}
	if n, err := f.s.Ledgers().Takes(t.Context(), p.Layout); err != nil || n != 3 {
		t.Errorf("Takes = %d, %v; want 3", n, err)
	}
	if time.Since(ledger[1].At) > time.Minute {
		t.Errorf("take time %v: want now", ledger[1].At)
	}
	// A new layout under a new epoch; dropping the old one leaves it alone.
	next := p
	next.Epoch = 2
	f.layOut(next, 4, 4)
	if err := f.s.Drop(t.Context(), p.Layout); err != nil {
		t.Fatal(err)
	}
	if n, _ := f.rdb.Exists(t.Context(), p.StockKey(0), p.LedgerKey(0), p.BuyerKey(1)).Result(); n != 0 {
		t.Errorf("%d keys of the dropped layout remain", n)
	}
	if diff := cmp.Diff([]int{4, 4}, f.levels(next)); diff != "" {
		t.Errorf("the new layout (-want +got):\n%s", diff)
	}
	// A take from the dropped layout finds its keys gone: not "sold out".
	if _, err := f.take(r, 9); !errors.Is(err, stock.ErrNotLaidOut) {
		t.Errorf("a take from a dropped layout: %v, want ErrNotLaidOut", err)
	}
	if _, err := f.s.Ledgers().Levels(t.Context(), p); !errors.Is(err, stock.ErrNotLaidOut) {
		t.Errorf("levels of a dropped layout: %v, want ErrNotLaidOut", err)
	}
}

func TestModeMustMatchTheStore(t *testing.T) {
	f := newFixture(t)
	p := product(1, stock.InRedis)
	f.layOut(p, 1)
	if _, err := f.take(stock.Request{Product: p, Taker: stock.DB{}}, 1); !errors.Is(err, stock.ErrWrongStore) {
		t.Errorf("db mode on a Redis product: %v, want ErrWrongStore", err)
	}
}

func TestHeldLockTimesOut(t *testing.T) {
	f := newFixture(t)
	p := product(1, stock.InRedis)
	f.layOut(p, 1)
	locker := lock.NewLocal()
	lease, err := locker.Acquire(t.Context(), p.LockKey(0), lock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	_, err = f.take(stock.Request{Product: p, Taker: stock.RMW{Locked: stock.Locked{Locker: locker}}}, 1)
	if !errors.Is(err, stock.ErrLockTimeout) {
		t.Errorf("taking under a held lock with no wait: %v, want ErrLockTimeout", err)
	}
}

// failingRelease wraps a Locker whose releases fail like a lost reply.
type failingRelease struct{ lock.Locker }

type failingLease struct{ lock.Lease }

func (f failingRelease) Acquire(ctx context.Context, key string, opt lock.Options) (lock.Lease, error) {
	l, err := f.Locker.Acquire(ctx, key, opt)
	if err != nil {
		return nil, err
	}
	return failingLease{l}, nil
}

func (f failingLease) Release(ctx context.Context) error {
	f.Lease.Release(ctx)
	return errors.New("i/o timeout")
}

// A release that fails after the write landed must not fail the take: the
// unit left the shard, so the caller must record it (or give it back).
func TestReleaseErrorAfterTheWriteKeepsTheUnitTaken(t *testing.T) {
	f := newFixture(t)
	p := product(1, stock.InRedis)
	f.layOut(p, 5)
	tk, err := f.take(stock.Request{Product: p, Taker: stock.RMW{Locked: stock.Locked{Locker: failingRelease{lock.NewLocal()}}}}, 1)
	if err != nil {
		t.Fatalf("take with a failing release: %v, want the unit taken", err)
	}
	if tk.ReleaseErr == nil {
		t.Error("the failed release is not reported")
	}
	if got := f.levels(p)[0]; got != 4 {
		t.Errorf("stock %d, want 4 left", got)
	}
}

// A fenced holder paused past its lease is refused at its write once a
// newer holder has been at the shard: nothing is taken twice.
func TestFencedStaleHolderIsRefused(t *testing.T) {
	f := newFixture(t)
	p := product(1, stock.InRedis)
	f.layOut(p, 5)
	fenced := lock.NewFenced(f.rdb)
	t.Cleanup(func() { fenced.Close() })
	opt := lock.Options{TTL: 100 * time.Millisecond, Wait: 5 * time.Second}
	stale := make(chan error, 1)
	go func() {
		_, err := f.take(stock.Request{Product: p, Taker: stock.RMW{Locked: stock.Locked{Locker: fenced, Lock: opt}}, Hooks: holding(time.Second)}, 1)
		stale <- err
	}()
	// The first holder has read and is paused in its hold; its lease runs
	// out (miniredis's clock is moved past it). The second takes the lock
	// with a newer token and writes while the first still holds its read.
	deadline := time.Now().Add(5 * time.Second)
	for !f.mr.Exists(p.FenceKey(0)) { // written by the first holder's fenced read
		if time.Now().After(deadline) {
			t.Fatal("the first holder never read")
		}
		time.Sleep(time.Millisecond)
	}
	f.mr.FastForward(200 * time.Millisecond)
	if _, err := f.take(stock.Request{Product: p, Taker: stock.RMW{Locked: stock.Locked{Locker: fenced, Lock: opt}}}, 2); err != nil {
		t.Fatal(err)
	}
	if err := <-stale; !errors.Is(err, stock.ErrLeaseLost) {
		t.Errorf("the stale holder's write: %v, want ErrLeaseLost", err)
	}
	if got := f.levels(p)[0]; got != 4 {
		t.Errorf("stock %d, want 4: one unit taken, by the newer holder only", got)
	}
}

// giveBackDuring gives a unit back to shard 0, which the purchase has already
// found empty, as it moves on to shard 1: another request of the process
// doing so at that instant.
type giveBackDuring struct {
	lock.Locker
	once  sync.Once
	store *stock.Store
	req   stock.Request
	taken stock.Taken
}

func (g *giveBackDuring) Acquire(ctx context.Context, key string, opt lock.Options) (lock.Lease, error) {
	if key == g.req.Product.LockKey(1) {
		g.once.Do(func() {
			if back, err := g.store.GiveBack(ctx, g.req, g.taken); err != nil || !back {
				panic(err)
			}
		})
	}
	return g.Locker.Acquire(ctx, key, opt)
}

// A purchase that finds every shard empty must not set the sold-out flag
// over a unit that came back during its scan.
func TestSoldOutFlagDoesNotHideAUnitGivenBackMidScan(t *testing.T) {
	f := newFixture(t)
	p := product(2, stock.InRedis)
	f.layOut(p, 1, 0)
	// The first take starts at shard 1 (empty) and falls back to shard 0.
	r := stock.Request{Product: p, Taker: stock.Lua{}}
	taken, err := f.take(r, 99)
	if err != nil || taken.Shard != 0 {
		t.Fatalf("the first take: shard %d, %v", taken.Shard, err)
	}
	r.Ticket = ticket(99)
	locker := &giveBackDuring{Locker: lock.NewLocal(), store: f.s, req: r, taken: taken}
	// The next starts at shard 0, then moves on to shard 1; the unit reaches
	// shard 0 in between.
	if _, err := f.take(stock.Request{Product: p, Taker: stock.RMW{Locked: stock.Locked{Locker: locker}}}, 1); !errors.Is(err, stock.ErrSoldOut) {
		t.Fatalf("the scan: %v, want ErrSoldOut (both shards were empty when read)", err)
	}
	if f.s.Flags().SoldOut(p.ID) {
		t.Fatal("the flag is set although a unit came back during the scan")
	}
	if _, err := f.take(stock.Request{Product: p, Taker: stock.RMW{Locked: stock.Locked{Locker: lock.NewLocal()}}}, 2); err != nil {
		t.Errorf("the unit given back cannot be bought: %v", err)
	}
}

// holding are hooks that pause d in the critical section, or until the
// take's context ends, as a holder paused by a GC or a slow call would.
func holding(d time.Duration) *stock.Hooks {
	return &stock.Hooks{Inside: func(ctx context.Context) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
}
