package lock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	_ "github.com/go-sql-driver/mysql" // the mysql strategy's own pool
	"github.com/redis/go-redis/v9"
)

// PoolConfig names the servers a Pool locks on.
type PoolConfig struct {
	// Redis is the main Redis, where the stock lives. The Pool uses it and
	// does not close it. Required by every Redis strategy.
	Redis redis.UniversalClient
	// NodeAddrs are independent Redis servers for redlock ("host:port").
	// The Pool connects to them and closes them. Default: none, and redlock
	// is unsupported.
	NodeAddrs []string
	// MySQLDSN is the database of the mysql strategy. The Pool opens a pool
	// of its own on it (see MySQLConns) and closes it. Default: none, and
	// mysql is unsupported.
	MySQLDSN string
	// MySQLConns bounds the mysql strategy's connections: each waiter holds
	// one while the server makes it wait, so this is also the most
	// purchases that wait for a named lock at once; the others queue for a
	// connection. Default: DefaultMySQLConns.
	MySQLConns int
	// Etcd connects to etcd on the etcd strategy's first use; its owner
	// closes what it opened. Default: none, and etcd is unsupported.
	Etcd EtcdConnect
}

// DefaultMySQLConns is PoolConfig.MySQLConns's default. With the service's
// own pool it keeps three instances well inside MariaDB's default
// max_connections of 151 (see docs/API.md).
const DefaultMySQLConns = 16

// mysqlIdle is how long an idle connection of the mysql strategy stays
// open: a burst of waiters must not keep the database's connections after it.
const mysqlIdle = 30 * time.Second

// Pool builds each strategy once per process, on demand, and owns the
// backends only strategies need (the redlock nodes, the mysql connection
// pool): Close closes the strategies and those backends. Its methods are
// safe for concurrent use.
type Pool struct {
	b     Backends
	owned []io.Closer

	mu      sync.Mutex
	lockers map[string]Locker
	closed  bool
}

// OpenPool connects to the servers cfg names beyond the main Redis. A
// redlock node that does not answer is an error: a misconfigured node would
// otherwise surface as a lock that never reaches its quorum.
func OpenPool(ctx context.Context, cfg PoolConfig) (_ *Pool, err error) {
	p := &Pool{b: Backends{Redis: cfg.Redis, Etcd: cfg.Etcd}, lockers: make(map[string]Locker)}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	for _, addr := range cfg.NodeAddrs {
		n := redis.NewClient(nodeOptions(addr))
		p.owned = append(p.owned, n)
		if err := n.Ping(ctx).Err(); err != nil {
			return nil, fmt.Errorf("connecting to redlock node %s: %w", addr, err)
		}
		p.b.Nodes = append(p.b.Nodes, n)
	}
	if cfg.MySQLDSN != "" {
		db, err := sql.Open("mysql", cfg.MySQLDSN)
		if err != nil {
			return nil, fmt.Errorf("opening the mysql lock's pool: %w", err)
		}
		p.owned = append(p.owned, db)
		conns := cfg.MySQLConns
		if conns <= 0 {
			conns = DefaultMySQLConns
		}
		db.SetMaxOpenConns(conns)
		db.SetMaxIdleConns(conns)
		db.SetConnMaxIdleTime(mysqlIdle)
		p.b.SQL, p.b.SQLDialect = db, "mysql"
	}
	return p, nil
}

// nodeOptions are a redlock node's client options. Redlock waits only a few
// tens of milliseconds for each node, so a dead node must fail at once
// rather than be dialled again and again.
func nodeOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr:          addr,
		PoolSize:      256,
		DialTimeout:   500 * time.Millisecond,
		DialerRetries: 1,
		MaxRetries:    -1,
		ReadTimeout:   time.Second,
		WriteTimeout:  time.Second,
	}
}

// ErrClosed: the Pool was closed.
var ErrClosed = errors.New("lock: pool closed")

// Get returns the process's instance of the named strategy, building it on
// first use. ErrUnknownStrategy and ErrUnsupported say why it cannot.
func (p *Pool) Get(name string) (Locker, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	if l, ok := p.lockers[name]; ok {
		return l, nil
	}
	l, err := New(name, p.b)
	if err != nil {
		return nil, err
	}
	p.lockers[name] = l
	return l, nil
}

// Close closes every strategy built (ending their subscriptions), then the
// backends the Pool opened. Leases still held are not released.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	var errs []error
	for name, l := range p.lockers {
		if c, ok := l.(io.Closer); ok {
			if err := c.Close(); err != nil {
				errs = append(errs, fmt.Errorf("closing lock %s: %w", name, err))
			}
		}
	}
	for _, c := range p.owned {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
