package embedded

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"io"

	_ "github.com/glebarez/go-sqlite" // registers the driver "sqlite"
)

// MemorySQLite makes an in-memory SQLite database of this process's own,
// and returns the DSN of a connection to it (with params, "a=b&c=d",
// appended) and what keeps it: the database lives until keep is closed.
//
// Every connection to the DSN shares the one database; a private one
// (file::memory:) is a new, empty database on each connection. And the
// database must outlive any connection: SQLite frees a shared in-memory
// database with its last connection, and database/sql drops a connection
// whenever a transaction's context ends before its commit (the driver
// cannot tell it that the connection is still good). Were that the pool's
// only connection, every table would go with it.
func MemorySQLite(ctx context.Context, params string) (dsn string, keep io.Closer, err error) {
	dsn = "file:seckill-" + rand.Text() + "?mode=memory&cache=shared"
	if params != "" {
		dsn += "&" + params
	}
	pool, err := sql.Open("sqlite", dsn)
	if err != nil {
		return "", nil, fmt.Errorf("opening the in-memory database: %w", err)
	}
	conn, err := pool.Conn(ctx)
	if err != nil {
		pool.Close()
		return "", nil, fmt.Errorf("opening the in-memory database: %w", err)
	}
	return dsn, closers{conn, pool}, nil
}

// closers closes each in turn.
type closers []io.Closer

func (cs closers) Close() error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
