package stock

import (
	"context"
	"time"

	"seckill/internal/lock"
)

// A Taker is one way to take a unit from a shard: a sale mode's step of a
// take, one file each (take_lua.go, take_async.go, take_db.go,
// take_rmw.go, sqlrmw.go), as the lock ladder is one file per lock. Take
// picks the shards, claims the buyer and turns the answers into outcomes;
// the taker only tries the shard it is given. Its fields are all it needs,
// so that a request carries no field of another mode. The takers are
// stock's: each speaks to the store's own keys and scripts.
type Taker interface {
	// Where is the store the taker takes from; Take refuses a product
	// whose stock is elsewhere.
	Where() Where
	// takeShard tries the shard t names for r's ticket: false when it is
	// empty. It fills in what it learnt on the way (t.Token, t.LockWait,
	// t.Held...).
	takeShard(ctx context.Context, s *Store, r Request, t *Taken) (bool, error)
	// writeLock is the lock every other change of a shard's stock must
	// take too (a give-back, a restore): that of a taker that reads and
	// then writes an absolute value. Nil for none.
	writeLock() *Locked
}

// Locked is what a taker that reads and then writes (RMW, SQLRMW) needs of
// the shard's lock.
type Locked struct {
	// Locker guards the read-modify-write.
	Locker lock.Locker
	Lock   lock.Options
	// GiveBackWait is how long a give-back or a restore waits for the
	// shard's lock. It must outlast the longest a live holder may hold it:
	// after that, whoever holds the lock is a crashed holder that will
	// never write, and the unit goes back without it. Default:
	// DefaultGiveBackWait.
	GiveBackWait time.Duration
}

// writeLock is l, or nil without a Locker.
func (l Locked) writeLock() *Locked {
	if l.Locker == nil {
		return nil
	}
	return &l
}

// DefaultGiveBackWait is Locked.GiveBackWait's default.
const DefaultGiveBackWait = 15 * time.Second
