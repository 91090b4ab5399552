// Package stock holds a product's stock, split across shards so that one hot
// key is not one hot lock, and the three ways the lab takes a unit of it:
//
//   - rmw: read-modify-write (GET, check, SET) inside a lock chosen by name.
//     Without a lock it oversells; that is the lesson.
//   - lua: one atomic Lua script; no lock needed.
//   - db: a conditional SQL UPDATE ... WHERE stock > 0; no lock needed.
//
// Stock for rmw and lua lives in Redis, under one key per shard,
// seckill:stock:{ID_N}. The braces are a Redis Cluster hash tag, so a shard's
// stock key and its lock key, seckill:lock:{ID_N}, live in the same slot and a
// script may touch both. The product's buyer set and shard list are separate
// keys; on a cluster the lua mode would need a buyer set per shard. Stock for
// db lives in the table product_shards. Which store a product uses is fixed
// when it is laid out; rmw and lua may be switched per request.
package stock

import (
	"errors"
	"fmt"
	"strconv"
)

// Mode is a way to take one unit.
type Mode string

// The modes, by their user-facing names.
const (
	RMW Mode = "rmw"
	Lua Mode = "lua"
	DB  Mode = "db"
)

// Modes lists the modes in teaching order.
func Modes() []Mode { return []Mode{RMW, Lua, DB} }

// ParseMode checks a user-facing mode name.
func ParseMode(s string) (Mode, error) {
	for _, m := range Modes() {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("%w %q (want rmw, lua or db)", ErrUnknownMode, s)
}

// Where says which store holds a product's stock.
type Where string

// The stores.
const (
	InRedis Where = "redis"
	InSQL   Where = "sql"
)

// Store is where m takes its units from.
func (m Mode) Store() Where {
	if m == DB {
		return InSQL
	}
	return InRedis
}

// Outcomes a caller branches on.
var (
	ErrSoldOut       = errors.New("stock: sold out")
	ErrAlreadyBought = errors.New("stock: already bought")
	ErrUnknownMode   = errors.New("stock: unknown mode")
	// ErrWrongStore: the request's mode takes from a store that does not hold
	// this product's stock (db on a Redis product, or rmw/lua on an SQL one).
	ErrWrongStore = errors.New("stock: mode does not match the product's store")
	// ErrLockTimeout: the shard's lock was not obtained within the wait.
	ErrLockTimeout = errors.New("stock: lock not obtained in time")
	// ErrLeaseLost: a fenced write was refused because a newer holder had
	// written since; nothing was taken.
	ErrLeaseLost = errors.New("stock: lease lost before the write")
)

// MaxShards bounds the shards of one product.
const MaxShards = 64

// StockKey is the Redis key of a shard's stock.
func StockKey(product int64, shard int) string {
	return "seckill:stock:{" + strconv.FormatInt(product, 10) + "_" + strconv.Itoa(shard) + "}"
}

// LockKey is the Redis key of a shard's lock; it shares StockKey's hash tag.
func LockKey(product int64, shard int) string {
	return "seckill:lock:{" + strconv.FormatInt(product, 10) + "_" + strconv.Itoa(shard) + "}"
}

// ShardListKey is the Redis list of a product's shard keys.
func ShardListKey(product int64) string {
	return "seckill:shards:" + strconv.FormatInt(product, 10)
}

// BuyersKey is the Redis set of users who bought the product through lua.
func BuyersKey(product int64) string {
	return "seckill:buyers:" + strconv.FormatInt(product, 10)
}

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
