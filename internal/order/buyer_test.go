package order_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"seckill/internal/api"
	"seckill/internal/catalogue"
	"seckill/internal/idgen"
	"seckill/internal/order"
)

// TestNotYoursCostsWhatAMissCosts (issue 36, finding 10): to a signed-in
// buyer, another buyer's order and an order that does not exist are one
// answer after the same work: the same Redis commands and SQL statements,
// in the same order. On the parent commit the miss alone looked among the
// queued orders (one Redis round trip more).
func TestNotYoursCostsWhatAMissCosts(t *testing.T) {
	f := newFixture(t, order.Options{})
	f.Reset(catalogue.ProductSpec{ID: 1, Stock: 5, Shards: 1})
	alice := order.Buyer{ID: api.FirstNamedBuyer + 1, Signed: true}
	bob := order.Buyer{ID: api.FirstNamedBuyer + 2, Signed: true}
	theirs, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: alice.ID, ProductID: 1})
	if err != nil {
		t.Fatal(err)
	}
	w := watchLookups(t, f.rdb, f.db)
	read := func(id idgen.ID, b order.Buyer) ([]string, error) {
		ctx, seen := w.counting(t.Context())
		_, err := f.svc.Reads().OrderFor(ctx, id, b)
		return seen(), err
	}
	// Alice's read fills the catalogue's cache, as the sale's purchases
	// do on an instance that sells it: a product this instance never read
	// costs one SQL read, once per product, not per order.
	if o, err := f.svc.Reads().OrderFor(t.Context(), theirs.ID, alice); err != nil || o.ID != theirs.ID {
		t.Fatalf("alice reads her order: %+v %v", o, err)
	}
	for range 2 {
		notYours, errNotYours := read(theirs.ID, bob)
		missing, errMissing := read(theirs.ID+1, bob) // next to alice's: no order has it
		if !errors.Is(errNotYours, order.ErrNotFound) || !errors.Is(errMissing, order.ErrNotFound) {
			t.Fatalf("bob reads alice's order: %v; an order that does not exist: %v; want both not found", errNotYours, errMissing)
		}
		if len(missing) == 0 {
			t.Fatal("no lookup was counted: the counting does not see the reads")
		}
		if d := cmp.Diff(missing, notYours); d != "" {
			t.Errorf("lookups for an order that does not exist (-) and another buyer's (+):\n%s", d)
		}
	}
}

// lookupWatch records the Redis commands and SQL statements sent on a
// context that counting marked, and no others (the service's own loops
// keep running meanwhile).
type lookupWatch struct {
	mu   sync.Mutex
	seen map[*int]*[]string
}

type countingKey struct{}

func watchLookups(t *testing.T, rdb interface{ AddHook(redis.Hook) }, db *gorm.DB) *lookupWatch {
	t.Helper()
	w := &lookupWatch{seen: map[*int]*[]string{}}
	rdb.AddHook(w)
	note := func(kind string) func(*gorm.DB) {
		return func(db *gorm.DB) { w.note(db.Statement.Context, "sql "+kind+" "+db.Statement.Table) }
	}
	cb := db.Callback()
	for name, err := range map[string]error{
		"query":  cb.Query().Before("gorm:query").Register("test:lookups", note("query")),
		"row":    cb.Row().Before("gorm:row").Register("test:lookups", note("row")),
		"raw":    cb.Raw().Before("gorm:raw").Register("test:lookups", note("raw")),
		"create": cb.Create().Before("gorm:create").Register("test:lookups", note("create")),
		"update": cb.Update().Before("gorm:update").Register("test:lookups", note("update")),
		"delete": cb.Delete().Before("gorm:delete").Register("test:lookups", note("delete")),
	} {
		if err != nil {
			t.Fatalf("registering the %s callback: %v", name, err)
		}
	}
	t.Cleanup(func() {
		_ = cb.Query().Remove("test:lookups")
		_ = cb.Row().Remove("test:lookups")
		_ = cb.Raw().Remove("test:lookups")
		_ = cb.Create().Remove("test:lookups")
		_ = cb.Update().Remove("test:lookups")
		_ = cb.Delete().Remove("test:lookups")
	})
	return w
}

// counting marks a context: what is sent on it is recorded, and seen
// returns it.
func (w *lookupWatch) counting(ctx context.Context) (context.Context, func() []string) {
	mark, list := new(int), new([]string)
	w.mu.Lock()
	w.seen[mark] = list
	w.mu.Unlock()
	return context.WithValue(ctx, countingKey{}, mark), func() []string {
		w.mu.Lock()
		defer w.mu.Unlock()
		return append([]string(nil), *list...)
	}
}

func (w *lookupWatch) note(ctx context.Context, what string) {
	mark, ok := ctx.Value(countingKey{}).(*int)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if list := w.seen[mark]; list != nil {
		*list = append(*list, what)
	}
}

func (w *lookupWatch) DialHook(next redis.DialHook) redis.DialHook { return next }

func (w *lookupWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		w.note(ctx, "redis "+cmd.Name())
		return next(ctx, cmd)
	}
}

func (w *lookupWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			w.note(ctx, "redis pipelined "+cmd.Name())
		}
		return next(ctx, cmds)
	}
}
