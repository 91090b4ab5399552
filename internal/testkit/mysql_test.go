package testkit

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"testing"
	"time"
)

// session is one connection of db, closed when the test ends, and its id.
func session(t *testing.T, db *sql.DB) (*sql.Conn, int64) {
	t.Helper()
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var id int64
	if err := conn.QueryRowContext(t.Context(), "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	return conn, id
}

func tryLock(t *testing.T, conn *sql.Conn, name string, timeout float64) sql.NullInt64 {
	t.Helper()
	var got sql.NullInt64
	if err := conn.QueryRowContext(t.Context(), "SELECT GET_LOCK(?, ?)", name, timeout).Scan(&got); err != nil {
		t.Fatalf("GET_LOCK(%s, %v): %v", name, timeout, err)
	}
	return got
}

// TestGetLock pins down what the mysql lock relies on of GET_LOCK, on
// MariaDB and on the embeddedMySQL server alike: a wait of a fraction of a
// second waits, KILL QUERY ends a wait without the lock, and a session's
// locks go with its connection.
func TestGetLock(t *testing.T) {
	db := OpenMySQL(t, NewMySQL(t))
	a, _ := session(t, db)
	b, bID := session(t, db)
	c, _ := session(t, db)
	const name = "mysqltest-lock"
	if got := tryLock(t, a, name, 0); got.Int64 != 1 {
		t.Fatalf("A's GET_LOCK of a free lock = %v; want 1", got)
	}

	const timeout = 0.3
	start := time.Now()
	if got := tryLock(t, b, name, timeout); !got.Valid || got.Int64 != 0 {
		t.Fatalf("B's GET_LOCK(%v) while A holds = %v; want 0", timeout, got)
	}
	// A timeout is the least a refused wait lasts: checked only from below.
	if waited := time.Since(start); waited < time.Duration(timeout*0.9*float64(time.Second)) {
		t.Errorf("B's GET_LOCK(%v) gave up after %v: a fraction of a second was not waited", timeout, waited)
	}

	// B waits, much longer than the test lasts, until killed.
	type result struct {
		got sql.NullInt64
		err error
	}
	killed := make(chan result, 1)
	go func() {
		var r result
		r.err = b.QueryRowContext(context.WithoutCancel(t.Context()), "SELECT GET_LOCK(?, 60)", name).Scan(&r.got)
		killed <- r
	}()
	waitFor(t, db, bID)
	if _, err := db.ExecContext(t.Context(), fmt.Sprintf("KILL QUERY %d", bID)); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-killed:
		// NULL on MariaDB, an error on the embeddedMySQL server.
		if r.err == nil && r.got.Valid {
			t.Fatalf("B's killed GET_LOCK = %d; want NULL or an error", r.got.Int64)
		}
		t.Logf("B's killed GET_LOCK: %v, %v", r.got, r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("KILL QUERY did not end B's GET_LOCK")
	}
	// The killed wait took nothing: once A lets go, C gets the lock.
	var released sql.NullInt64
	if err := a.QueryRowContext(t.Context(), "SELECT RELEASE_LOCK(?)", name).Scan(&released); err != nil || released.Int64 != 1 {
		t.Fatalf("A's RELEASE_LOCK = %v, %v; want 1", released, err)
	}
	if got := tryLock(t, c, name, 0); got.Int64 != 1 {
		t.Fatalf("C's GET_LOCK after A released = %v; want 1: the killed session took the lock", got)
	}

	// C's session ends without RELEASE_LOCK: its lock goes with it.
	_ = c.Raw(func(any) error { return driver.ErrBadConn })
	c.Close()
	if got := tryLock(t, a, name, 10); got.Int64 != 1 {
		t.Fatalf("A's GET_LOCK after C's connection closed = %v; want 1", got)
	}
}

// waitFor polls until session id is running a query.
func waitFor(t *testing.T, db *sql.DB, id int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		err := db.QueryRowContext(t.Context(),
			"SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ? AND INFO LIKE '%GET_LOCK%'", id).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %d is not waiting in GET_LOCK", id)
		}
		time.Sleep(5 * time.Millisecond) // the poll interval
	}
}
