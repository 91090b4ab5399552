// Package stock holds a product's stock, split across shards so that one hot
// key is not one hot lock, and the three ways the lab takes a unit of it:
//
//   - rmw: read-modify-write (GET, check, write) inside a lock chosen by
//     name. Without a lock it oversells; that is the lesson.
//   - lua: one atomic Lua script; no lock needed.
//   - db: a conditional SQL UPDATE ... WHERE stock > 0, in the transaction
//     that writes the order; no lock needed.
//   - sqlrmw: read-modify-write of the SQL row (SELECT, UPDATE to the value
//     read minus one) in the order's transaction, inside a lock that must be
//     held until the COMMIT.
//   - async: lua's script, which also queues the order (under the id
//     drawn for it before) on the shard's stream, in the same atomic step;
//     a consumer writes the orders later.
//   - mq: lua's script; the order then goes to a message broker, in a step
//     of its own (internal/order).
//
// Stock for rmw and lua lives in Redis (see Layout for the keys). Every take
// is recorded, in the same atomic step, in the shard's ledger and under the
// buyer: one unit per buyer holds across shards, a retried take finds the
// first one's record instead of taking again, and a unit that left the store
// without reaching an order can be found and returned. Stock for db lives in
// the table product_shards, for db and sqlrmw. Which store a product uses is
// fixed when it is laid out; modes of one store may be switched per request.
//
// A take knows no lab fault: it calls Hooks at its moments (the lock
// obtained, the read, inside the critical section, the write, the release),
// and the lab's trace and faults hook them. A sale to the public has none.
//
// On a Redis Cluster (the store's client a *redis.ClusterClient), a shard's
// keys share a slot, and a buyer's key is in a slot of its own, which no
// script may touch with a shard's: a purchase claims the buyer's key first,
// takes, then settles or forgets the claim (claim.go). That leaves windows,
// each bounded by the claim window or the reconciler: docs/INVARIANT.md,
// "On a Redis Cluster".
package stock

import (
	"errors"
	"fmt"

	"seckill/internal/api"
)

// Where says which store holds a product's stock.
type Where string

// The stores.
const (
	InRedis Where = "redis"
	InSQL   Where = "sql"
)

// Outcomes a caller branches on.
var (
	ErrSoldOut = errors.New("stock: sold out")
	// ErrAlreadyBought: the buyer took a unit of this product already. The
	// error is a *TakenBefore that carries that take's record.
	ErrAlreadyBought = errors.New("stock: already bought")
	// ErrWrongStore: the request's taker takes from a store that does not
	// hold this product's stock (db on a Redis product, or rmw/lua on an SQL
	// one).
	ErrWrongStore = errors.New("stock: mode does not match the product's store")
	// ErrLockTimeout: the shard's lock was not obtained within the wait.
	ErrLockTimeout = errors.New("stock: lock not obtained in time")
	// ErrLeaseLost: a fenced read or write was refused because a newer
	// holder had been at the shard; nothing was taken.
	ErrLeaseLost = errors.New("stock: lease lost before the write")
	// ErrNotLaidOut: a shard's stock key is missing. Either the caller's
	// layout is stale (the product was reset) or Redis lost the stock.
	ErrNotLaidOut = errors.New("stock: not laid out")
	// ErrOutcomeUnknown: a write was sent to Redis and no answer came back
	// (the client's retries included): the unit may or may not have been
	// taken. A take is idempotent, so running it again tells.
	ErrOutcomeUnknown = errors.New("stock: outcome unknown")
)

// TakenBefore is ErrAlreadyBought with the record of the buyer's take.
type TakenBefore struct{ Prior Entry }

func (e *TakenBefore) Error() string {
	return fmt.Sprintf("%v: order %s, shard %d", ErrAlreadyBought, e.Prior.Order, e.Prior.Shard)
}

// Is makes errors.Is(err, ErrAlreadyBought) true.
func (e *TakenBefore) Is(target error) bool { return target == ErrAlreadyBought }

// MaxShards bounds the shards of one product.
const MaxShards = api.MaxShards

// Split spreads total over n shards, the remainder over the first shards.
func Split(total, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = total / n
		if i < total%n {
			out[i]++
		}
	}
	return out
}
