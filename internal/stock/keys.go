package stock

import (
	"strconv"
	"time"
)

// Layout is where one product's stock lives in Redis: its shard count and
// the epoch of its keys. Every key of a shard carries the shard's hash tag
// {ID_k}, so a shard's stock, ledger, fence and lock fall in one Redis
// Cluster slot and one script may touch them all, while the shards of a
// product spread over slots. The epoch changes when the stock is laid out
// anew (a reset, or a rebuild after Redis lost it): a process that still
// holds the old epoch finds its keys gone instead of writing over the new
// ones.
type Layout struct {
	ID     int64
	Shards int
	Epoch  int64
}

func (l Layout) tag(shard int) string {
	return "{" + strconv.FormatInt(l.ID, 10) + "_" + strconv.Itoa(shard) + "}"
}

func (l Layout) epoch() string { return ":" + strconv.FormatInt(l.Epoch, 10) }

// StockKey is the Redis key of a shard's stock, an integer.
func (l Layout) StockKey(shard int) string { return "seckill:stock:" + l.tag(shard) + l.epoch() }

// FenceKey holds the highest fencing token a write to the shard's stock has
// carried; a fenced writer with an older token is refused.
func (l Layout) FenceKey(shard int) string { return l.StockKey(shard) + ":fence" }

// LedgerKey is the hash of the units taken from a shard, one field per
// buyer: the record of each take (see Ticket). It is written in the same
// atomic step as the stock, so that every unit out of the store can be
// traced to an order or found stranded.
func (l Layout) LedgerKey(shard int) string { return "seckill:taken:" + l.tag(shard) + l.epoch() }

// RepairKey is the hash of a shard's repairs in this layout: "restored",
// the takes the shard had forgotten and that were recorded again with
// their unit, and "short", those recorded again when the stock had no unit
// left to take back (see Restore).
func (l Layout) RepairKey(shard int) string { return "seckill:repaired:" + l.tag(shard) + l.epoch() }

// LockKey is the Redis key of a shard's lock. It does not carry the epoch:
// a lock guards the shard, whichever layout it holds.
func (l Layout) LockKey(shard int) string { return "seckill:lock:" + l.tag(shard) }

// BuyerKey records that a user took a unit of the product, and which: it
// enforces one unit per buyer across the shards and makes a retried take
// return the first outcome. Its hash tag is the buyer's, not a shard's: on
// a cluster it lives in its own slot.
func (l Layout) BuyerKey(user int64) string {
	return "seckill:buyer:{" + strconv.FormatInt(l.ID, 10) + ":" + strconv.FormatInt(user, 10) + "}" + l.epoch()
}

// ReplicaMarkKey is the write a replicated product's take is followed by
// on its shard's master, so that a WAIT counts the replicas that have the
// take (see replicated.lua). It expires by itself.
func (l Layout) ReplicaMarkKey(shard int) string {
	return "seckill:replicated:" + l.tag(shard) + l.epoch()
}

// StreamKey is the shard's stream of queued orders (the async mode): the
// outbox its take writes to, in the shard's slot.
func (l Layout) StreamKey(shard int) string { return "seckill:orders:" + l.tag(shard) + l.epoch() }

// ShardPendingKey is, on a Redis Cluster, the hash of the shard's queued
// orders by order id, "product shard user sale": the pending index of the
// orders in its stream, in the shard's slot, so that the take writes it in
// the same script (on one Redis the day's PendingKey holds them all).
func (l Layout) ShardPendingKey(shard int) string {
	return "seckill:pending:" + l.tag(shard) + l.epoch()
}

// generationKey counts the times member (a stream, a deadline set) was
// closed: dropped from its registry (see registry.go). It lives in the
// member's slot, and outlives the member.
func GenerationKey(member string) string { return member + ":gen" }

// Names the async mode's consumers share.
const (
	// StreamsKey is the registry of the streams that may hold orders, a
	// hash of stream → the generation it was enrolled at (registry.go): a
	// stream is enrolled before its first order, and a consumer drops one
	// it found drained. A store with a deployment name keeps its own (see
	// ForDeployment).
	StreamsKey = "seckill:order-streams"
	// OldStreamsKey is the registry before generations, a set, which a
	// process of an earlier version may have left orders listed in.
	OldStreamsKey = "seckill:streams"
	// Group is the consumer group every stream is read by.
	Group = "orders"
	// DeadLetterKey is the stream of orders the database refused, with the
	// reason; their units went back to the store.
	DeadLetterKey = "seckill:orders:dead"
	// DeadCountKey counts the dead letters per sale, field "product:sale",
	// so that the audit can account for the units of orders answered 202
	// and refused since: each went back to its shard.
	DeadCountKey = "seckill:orders:dead:count"
)

// PendingKey is the hash of the queued orders of the day t falls in (UTC),
// by order id: "product shard user sale", or "failed @product:user <reason>" for one
// the database refused. It answers GET /api/orders/:id until the order is
// written.
func PendingKey(t time.Time) string { return "seckill:pending:" + t.UTC().Format("2006:01:02") }

// MarkerKey is a hash describing the product's current layout (epoch,
// shards, initial stock). It is read only when a product is created, so
// that a process whose database does not know the product does not lay out
// its stock over a sale that another process is running.
func MarkerKey(product int64) string { return "seckill:product:" + strconv.FormatInt(product, 10) }

// shardKeys returns the stock keys of every shard, in shard order.
func (l Layout) shardKeys() []string {
	keys := make([]string, l.Shards)
	for i := range keys {
		keys[i] = l.StockKey(i)
	}
	return keys
}

// productPatterns match the keys of a product's shards and buyers, in any
// layout (hash tags {ID_k} and {ID:user}).
func productPatterns(id int64) []string {
	s := strconv.FormatInt(id, 10)
	return []string{"seckill:*{" + s + "_*}*", "seckill:buyer:{" + s + ":*}*", "seckill:told:{" + s + "}:*"}
}
