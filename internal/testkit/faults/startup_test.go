package faults_test

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"seckill/internal/app"
	"seckill/internal/catalogue"
	"seckill/internal/testkit"
)

// Three instances started at once on an empty database, beside an empty
// Redis, ten times over: every one comes up, and the demo product is
// created once (one sale, one layout). Before the migrations were
// serialized, two of three died on MariaDB ("Table already exists" while
// migrating, "Deadlock found" while creating the demo product).
func TestInstancesStartedTogether(t *testing.T) {
	if os.Getenv("MYSQL_DSN") == "" {
		// Tried on the embedded go-mysql-server (2026-11-26): every instance
		// came up, but in 3 of 10 tries the products table was empty after;
		// MariaDB passes 20 of 20. The test needs a server that isolates
		// concurrent transactions as MySQL does.
		testkit.Skip(t, testkit.NoMySQL, "MYSQL_DSN is not set: SQLite is one process, and the race is a database server's; the embedded go-mysql-server "+
			"does not isolate concurrent transactions as MySQL does (the demo product's row was missing in 3 of 10 tries there)")
	}
	const instances, tries = 3, 10
	for try := range tries {
		r := ownRedis(t)
		cfg := config(t, r.Addr, "") // a fresh database of its own (testenv.Database)
		cfg.DemoStock = 100
		log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
		var wg sync.WaitGroup
		start := make(chan struct{})
		srvs := make([]*app.Server, instances)
		errs := make([]error, instances)
		for i := range instances {
			wg.Go(func() {
				<-start
				srvs[i], errs[i] = app.Start(t.Context(), cfg, log, app.Extras{})
			})
		}
		close(start)
		wg.Wait()
		up := 0
		for i, err := range errs {
			if err != nil {
				t.Errorf("try %d: instance %d did not start: %v", try, i, err)
				continue
			}
			up++
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := srvs[i].Shutdown(ctx); err != nil {
					t.Errorf("shutting instance %d down: %v", i, err)
				}
			})
		}
		if up == 0 {
			continue
		}
		var ps []catalogue.Product
		for _, s := range srvs {
			if s != nil {
				if err := s.DB().Find(&ps).Error; err != nil {
					t.Fatal(err)
				}
				break
			}
		}
		if len(ps) != 1 || ps[0].ID != app.DemoProduct || ps[0].Sale != 1 || ps[0].Initial != cfg.DemoStock {
			t.Errorf("try %d: products %+v, want the demo product once, in its first sale", try, ps)
		}
		t.Logf("try %d: %d of %d instances up", try, up, instances)
	}
}
