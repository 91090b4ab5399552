package app

import (
	"context"
	"testing"
	"time"
)

// The embedded database in memory outlives its connection: database/sql
// discards the connection of a transaction whose context ends while it is
// open (the SQLite driver cannot say the connection is still good), and a
// new connection to a private in-memory database would find it empty. A
// purchase whose client went away would take every order with it.
func TestInMemorySQLiteOutlivesItsConnection(t *testing.T) {
	db, closeDB, err := openSQL(t.Context(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeDB() })
	if err := db.Exec("CREATE TABLE kept (n INTEGER)").Error; err != nil {
		t.Fatal(err)
	}
	if err := db.Exec("INSERT INTO kept (n) VALUES (1)").Error; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	tx, err := sqlDB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	cancel() // the client went away mid-transaction
	deadline := time.Now().Add(5 * time.Second)
	for tx.Commit() == nil && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // the rollback is database/sql's, in the background
	}
	var n int64
	if err := db.Raw("SELECT COUNT(*) FROM kept").Scan(&n).Error; err != nil || n != 1 {
		t.Fatalf("after a transaction's context ended: %d rows, %v; want the 1 row written before", n, err)
	}
}
