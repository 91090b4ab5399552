package lock

import (
	"database/sql"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Backends are the servers a strategy may lock on. A strategy takes what it
// needs and refuses with ErrUnsupported when that is missing.
type Backends struct {
	// Redis is the main Redis server, where the stock lives.
	Redis *redis.Client
	// Nodes are independent Redis servers for redlock (REDIS_ADDRS).
	Nodes []*redis.Client
	// SQL is the database, for the mysql strategy.
	SQL *sql.DB
	// SQLDialect is the database's GORM dialect name: "mysql" or "sqlite".
	SQLDialect string
}

// Strategy is one row of the ladder.
type Strategy struct {
	// Name is the user-facing identifier.
	Name string
	// Summary says in one line what it fixes and what it breaks.
	Summary string
	new     func(Backends) (Locker, error)
}

// strategies is the ladder in teaching order: the one table that maps a
// user-facing name to its implementation.
var strategies = []Strategy{
	{Name: "none", Summary: "No lock: the baseline; read-modify-write oversells.",
		new: func(Backends) (Locker, error) { return None{}, nil }},
	{Name: "local", Summary: "In-process mutex: safe in one process, oversells across several.",
		new: func(Backends) (Locker, error) { return NewLocal(), nil }},
	{Name: "token", Summary: "SET NX PX with a random token, released by Lua compare-and-delete: only the owner releases; a paused holder can outlive its lease.",
		new: func(b Backends) (Locker, error) { return NewToken(b.Redis), nil }},
}

// Strategies lists the registered strategies in teaching order.
func Strategies() []Strategy { return append([]Strategy(nil), strategies...) }

// Lookup returns the strategy registered under name.
func Lookup(name string) (Strategy, error) {
	for _, s := range strategies {
		if s.Name == name {
			return s, nil
		}
	}
	return Strategy{}, fmt.Errorf("%w %q", ErrUnknownStrategy, name)
}

// New builds the strategy registered under name on b.
func New(name string, b Backends) (Locker, error) {
	s, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	return s.new(b)
}
