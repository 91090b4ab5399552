package faults_test

import (
	"net/http"
	"testing"

	mysqldrv "github.com/go-sql-driver/mysql"

	"seckill/internal/api"
	"seckill/internal/app"
	"seckill/internal/testkit"
	"seckill/internal/testkit/child"
)

// An INSERT that commits and whose answer is lost (the database's replies
// held by a proxy between the service and MariaDB, the statements through):
// the purchase cannot tell whether its order is written, so it neither
// answers 201 nor gives the unit back: 503 outcome_unknown with the order
// id. The row is there; after the reconciler's pass the audit is exact.
// Given back on the guess, the unit would be on sale beside its order.
func TestInsertAnswerLost(t *testing.T) {
	cfg := config(t, "", "")
	if cfg.MySQLDSN == "" {
		testkit.Skip(t, testkit.NoMySQL, "MYSQL_DSN is not set: SQLite writes in process, and no answer of it can be lost")
	}
	dsn, p := behindProxy(t, cfg.MySQLDSN)
	cfg.MySQLDSN = dsn
	s := newSale(t, start(t, cfg, app.Extras{}))
	s.reset(10, "none", "lua")
	s.accounts(1, 2) // made before the proxy holds the database's replies
	first := s.buy(1, "")
	if first.status != http.StatusCreated {
		t.Fatalf("a purchase before the hold: %v", first)
	}
	p.Hold()
	lost := s.buy(2, "")
	p.Release()
	if lost.status != http.StatusServiceUnavailable || lost.code != api.CodeOutcomeUnknown || lost.order == "" {
		t.Fatalf("a purchase whose INSERT's answer was lost: %v; want 503 %s with the order id", lost, api.CodeOutcomeUnknown)
	}
	s.reconcile()
	st := s.checkPromise([]outcome{first, lost})
	if len(st.orders) != 2 || st.remaining != 8 {
		t.Errorf("%d orders, %d units left: want both orders written and 8 left", len(st.orders), st.remaining)
	}
}

// behindProxy puts a proxy of the test's own in front of the MySQL server
// dsn names, and returns the DSN through it.
func behindProxy(t *testing.T, dsn string) (string, *child.Proxy) {
	t.Helper()
	cfg, err := mysqldrv.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p, err := child.StartProxy(cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	cfg.Addr = p.Addr()
	return cfg.FormatDSN(), p
}
