package lock

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"
)

// MySQL is a MySQL/MariaDB named lock, GET_LOCK(name, timeout), held by a
// database session for the whole critical section: the lease keeps its own
// *sql.Conn until Release calls RELEASE_LOCK on it.
//
// Why GET_LOCK and not SELECT … FOR UPDATE on a lock row: a named lock needs
// no table and no row made in advance for every key; it does not keep an
// InnoDB transaction (and its undo log and read view) open across the
// critical section; its timeout is per call and in microseconds (MariaDB
// 10.1.2 and later), where innodb_lock_wait_timeout is whole seconds per
// session; and a waiter is woken by the server the moment the lock is
// released, with no polling. Both die with the session, so a crashed holder's
// lock is freed when the server notices that its connection is gone, which
// is the only expiry this strategy has: Options.TTL is ignored.
//
// What it costs: a waiter holds a pooled connection while the server makes it
// wait, so the pool must have room for every waiter plus the connections the
// holder itself needs, or the holder starves behind the waiters until their
// Wait runs out. And the lock is only as available as the one database.
//
// Round trips: one to acquire a free lock, two to wait for a held one
// (waiting is server-side), one to release; twice that without
// interpolateParams=true in the DSN (prepare, then execute).
type MySQL struct {
	db *sql.DB
}

var _ Locker = (*MySQL)(nil)

// NewMySQL returns a named-lock strategy on db. dialect is the database's
// GORM dialect name; anything but "mysql" is refused with ErrUnsupported.
func NewMySQL(db *sql.DB, dialect string) (*MySQL, error) {
	switch {
	case db == nil:
		return nil, fmt.Errorf("%w: the mysql lock needs a MySQL or MariaDB database (set MYSQL_DSN)", ErrUnsupported)
	case dialect != "mysql":
		return nil, fmt.Errorf("%w: the mysql lock needs MySQL or MariaDB, not %s: SQLite has no GET_LOCK and silently ignores row locks (FOR UPDATE), so it would lock nothing", ErrUnsupported, dialect)
	}
	return &MySQL{db: db}, nil
}

func newMySQLBackends(b Backends) (Locker, error) {
	m, err := NewMySQL(b.SQL, b.SQLDialect)
	if err != nil {
		return nil, err // not m: a nil *MySQL in a Locker is not a nil Locker
	}
	return m, nil
}

// mysqlLockName maps key to a GET_LOCK name. Names are server-wide (not per
// database) and at most 64 characters in MySQL 5.7 and later, so longer keys
// are replaced by their SHA-256.
func mysqlLockName(key string) string {
	if len(key) <= 64 {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Acquire takes a connection and tries GET_LOCK(name, 0); if the lock is
// held and opt.Wait is positive, it waits on the same connection,
// server-side, for up to opt.Wait (cut short by ctx's deadline).
//
// A waiting GET_LOCK is not cut off by closing its connection, which is what
// the driver does when ctx ends: the server would go on waiting and could
// grant the lock to the abandoned session, which then holds it, with nobody
// in the critical section, until the server notices the session is gone.
// So the wait runs under a context that ctx does not cancel, and when ctx
// ends Acquire stops it the server's way, KILL QUERY from another
// connection, using the session id the first attempt fetched.
//
// Round trips: one when the lock is free or Wait is zero, two when it waits
// (plus the KILL QUERY if ctx ends first).
func (m *MySQL) Acquire(ctx context.Context, key string, opt Options) (Lease, error) {
	// Every waiter holds a connection, so a bounded pool may be full of them:
	// waiting for a connection is waiting for the lock, bounded by the same
	// Wait (plus a moment, so that fail-fast still gets its one attempt).
	cctx, cancel := context.WithTimeout(ctx, max(opt.Wait, 0)+100*time.Millisecond)
	conn, err := m.db.Conn(cctx)
	cancel()
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return nil, ErrNotObtained
	}
	if err != nil {
		return nil, fmt.Errorf("lock %s: taking a connection: %w", key, err)
	}
	name := mysqlLockName(key)
	var (
		session int64
		got     sql.NullInt64
	)
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID(), GET_LOCK(?, 0)", name).Scan(&session, &got); err != nil {
		discardConn(conn)
		return nil, fmt.Errorf("lock %s: GET_LOCK: %w", key, err)
	}
	wait := max(opt.Wait, 0)
	if deadline, ok := ctx.Deadline(); ok {
		wait = max(min(wait, time.Until(deadline)), 0)
	}
	if got.Valid && got.Int64 == 0 && wait > 0 {
		got, err = m.wait(ctx, conn, session, name, wait)
		if err != nil {
			discardConn(conn)
			return nil, fmt.Errorf("lock %s: GET_LOCK waiting: %w", key, err)
		}
	}
	switch {
	case got.Valid && got.Int64 == 1:
		return &mysqlLease{conn: conn, key: key, name: name}, nil
	case ctx.Err() != nil: // the wait was killed, or timed out at ctx's deadline
		_ = conn.Close()
		return nil, context.Cause(ctx)
	case !got.Valid: // NULL: an error such as the session being killed
		discardConn(conn)
		return nil, fmt.Errorf("lock %s: GET_LOCK returned NULL", key)
	}
	_ = conn.Close()
	return nil, ErrNotObtained
}

// wait runs GET_LOCK(name, wait) on conn, session, and kills it if ctx ends
// first. It returns when the GET_LOCK and any KILL QUERY have returned.
func (m *MySQL) wait(ctx context.Context, conn *sql.Conn, session int64, name string, wait time.Duration) (sql.NullInt64, error) {
	killed := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(killed)
		// Best effort: if the kill fails, the wait still ends at its timeout.
		_, _ = m.db.ExecContext(context.WithoutCancel(ctx), fmt.Sprintf("KILL QUERY %d", session))
	})
	var got sql.NullInt64
	err := conn.QueryRowContext(context.WithoutCancel(ctx), "SELECT GET_LOCK(?, ?)", name, wait.Seconds()).Scan(&got)
	if !stop() {
		<-killed
		if err != nil && ctx.Err() != nil {
			err = nil // "query execution was interrupted": our own kill
		}
	}
	return got, err
}

// discardConn closes conn's session instead of returning it to the pool, so that
// any named lock it may hold is freed with it.
func discardConn(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}

type mysqlLease struct {
	mu        sync.Mutex
	conn      *sql.Conn // nil once released
	key, name string
}

func (l *mysqlLease) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return ErrNotHeld
	}
	conn := l.conn
	l.conn = nil
	var released sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", l.name).Scan(&released); err != nil {
		discardConn(conn)
		return fmt.Errorf("lock %s: RELEASE_LOCK: %w", l.key, err)
	}
	if err := conn.Close(); err != nil {
		return fmt.Errorf("lock %s: returning the connection: %w", l.key, err)
	}
	if released.Int64 != 1 { // 0: another session holds it; NULL: nobody does
		return ErrNotHeld
	}
	return nil
}

// Token is 0: named locks carry no counter.
func (l *mysqlLease) Token() uint64 { return 0 }
