package order_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"seckill/internal/api"
	"seckill/internal/app"
	"seckill/internal/catalogue"
	"seckill/internal/order"
	"seckill/internal/stock"
	"seckill/internal/testkit"
	"seckill/internal/testkit/testenv"
)

// TestSQLRMWReleaseBeforeCommit sells stock kept in SQL by read-modify-write
// under the token lock, 12 buyers at once for 6 units. Released after the
// COMMIT, the lock makes each holder read the last one's write: exactly 6
// orders. Released before it (the lab's fault, with the hold spent between
// the release and the COMMIT), the next holder reads the value the last
// one has not committed yet, writes the same, and the 12 buyers all get an
// order: lost updates, oversold. It runs on MySQL: on SQLite the fault is
// refused, and go-mysql-server shows only the safe half.
func TestSQLRMWReleaseBeforeCommit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault bool
		want  string
	}{
		{"after commit", false, api.VerdictOK},
		{"before commit", true, api.VerdictOversold},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.fault && os.Getenv("MYSQL_DSN") == "" {
				// Its memory engine commits a transaction by writing its
				// tables whole: concurrent transactions lose each other's
				// orders, not the stock's decrements.
				testkit.Skip(t, testkit.NoMySQL, "MYSQL_DSN is unset: go-mysql-server has no row locks, and its commits overwrite each other's orders")
			}
			cfg := testenv.Config(t)
			cfg.MySQLDSN = testkit.NewMySQL(t)
			a, err := app.Open(t.Context(), cfg, nil, app.Extras{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.Close() })
			id := testenv.ProductID(t)
			_, err = a.Orders.Catalogue().Reset(t.Context(), catalogue.ProductSpec{ID: id, Stock: 6, Shards: 1, Lock: "token", Mode: api.ModeSQLRMW, Lab: true})
			if err != nil {
				t.Fatal(err)
			}
			var (
				wg              sync.WaitGroup
				mu              sync.Mutex
				sold, soldOut   int
				traces          []*stock.Trace
				unexpectedError error
			)
			start := make(chan struct{})
			for u := range 12 {
				wg.Go(func() {
					<-start
					tr := stock.NewTrace()
					_, _, err := a.Orders.Buy(context.Background(), order.Purchase{UserID: int64(u + 1), ProductID: id,
						Lab: order.LabOptions{Faults: order.Faults{Hold: 20 * time.Millisecond, ReleaseBeforeCommit: tc.fault}, Trace: tr}})
					mu.Lock()
					defer mu.Unlock()
					traces = append(traces, tr)
					switch {
					case err == nil:
						sold++
					case errors.Is(err, stock.ErrSoldOut):
						soldOut++
					default:
						unexpectedError = err
					}
				})
			}
			close(start)
			wg.Wait()
			if unexpectedError != nil {
				t.Fatal(unexpectedError)
			}
			_, au, err := a.Reconciler.Audit(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			if au.Verdict != tc.want {
				t.Errorf("audit %+v (sold %d, sold out %d), want %s", au, sold, soldOut, tc.want)
			}
			if !tc.fault && (sold != 6 || au.Remaining != 0) {
				t.Errorf("lock released after the commit: %d sold, %d left; want 6 and 0", sold, au.Remaining)
			}
			// The traces tell the same: with the fault, every release comes
			// before its commit; without, after.
			for _, tr := range traces {
				for _, s := range tr.Sections() {
					if s.Outcome != api.OutcomeTaken {
						continue
					}
					if s.ReleaseUS == nil || s.CommitUS == nil {
						t.Fatalf("a take's section without release or commit: %+v", s)
					}
					if before := *s.ReleaseUS < *s.CommitUS; before != tc.fault {
						t.Errorf("release at %dµs, commit at %dµs: released before the commit is %v, want %v",
							*s.ReleaseUS, *s.CommitUS, before, tc.fault)
					}
				}
			}
		})
	}
	t.Run("cancel returns the unit under the lock", testSQLRMWCancelUnderTheLock)
}

// TestReleaseBeforeCommitOnlyWhereItTeaches: the fault is refused outside
// the sqlrmw mode, and on SQLite, whose one connection runs one
// transaction at a time.
func TestReleaseBeforeCommitOnlyWhereItTeaches(t *testing.T) {
	f := newFixture(t, order.Options{})
	id := testenv.ProductID(t)
	for _, mode := range []string{api.ModeRMW, api.ModeSQLRMW} {
		f.Reset(catalogue.ProductSpec{ID: id, Stock: 5, Mode: mode, Lab: true})
		_, _, err := f.svc.Buy(t.Context(), order.Purchase{UserID: 1, ProductID: id,
			Lab: order.LabOptions{Faults: order.Faults{ReleaseBeforeCommit: true}}})
		if !errors.Is(err, order.ErrInvalid) {
			t.Errorf("mode %s on SQLite: %v, want ErrInvalid", mode, err)
		}
	}
}

// A cancellation returns its unit under the shard's lock on an sqlrmw
// product: a purchase between its SELECT and its UPDATE (here held there)
// would otherwise write the stock it read minus one over the returned unit.
func testSQLRMWCancelUnderTheLock(t *testing.T) {
	if os.Getenv("MYSQL_DSN") == "" {
		testkit.Skip(t, testkit.NoMySQL, "MYSQL_DSN is unset: on SQLite one connection serializes the transactions, and go-mysql-server has no row locks")
	}
	cfg := testenv.Config(t)
	cfg.MySQLDSN = testkit.NewMySQL(t)
	a, err := app.Open(t.Context(), cfg, nil, app.Extras{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	id := testenv.ProductID(t)
	_, err = a.Orders.Catalogue().Reset(t.Context(), catalogue.ProductSpec{ID: id, Stock: 5, Shards: 1, Lock: "token", Mode: api.ModeSQLRMW, Lab: true})
	if err != nil {
		t.Fatal(err)
	}
	first, _, err := a.Orders.Buy(t.Context(), order.Purchase{UserID: 1, ProductID: id})
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan error, 1)
	go func() { // reads 4, holds, writes 3
		_, _, err := a.Orders.Buy(context.Background(), order.Purchase{UserID: 2, ProductID: id,
			Lab: order.LabOptions{Faults: order.Faults{Hold: 300 * time.Millisecond}}})
		held <- err
	}()
	p, _ := a.Orders.Catalogue().Product(t.Context(), id)
	lockKey := stock.Layout{ID: id, Shards: 1, Epoch: p.Epoch}.LockKey(0)
	testenv.WaitFor(t, "the purchase holding the shard's lock", func() bool { return a.Redis().Exists(t.Context(), lockKey).Val() == 1 })
	if _, err := a.Orders.Lifecycle().Cancel(t.Context(), first.ID, order.Buyer{ID: 1, Signed: true}); err != nil {
		t.Fatal(err)
	}
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if _, au, err := a.Reconciler.Audit(t.Context(), id); err != nil || au.Remaining != 4 || au.Orders != 1 || au.Verdict != api.VerdictOK {
		t.Errorf("audit %+v, %v: want the returned unit kept (4 left, 1 order), OK", au, err)
	}
}
