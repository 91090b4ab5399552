package stock

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/idgen"
)

// The payment windows' delay queue: one sorted set per shard (in the
// shard's slot), order ids scored by the instant their window ends. Any
// process polls the sets and claims what is due with a lease; internal/
// order cancels what is still unpaid. The order row's due time stays the
// truth: a deadline lost here (a crash between the INSERT and the
// scheduling) is found by the reconciler.

var (
	//go:embed claim_due.lua
	claimDueLua    string
	claimDueScript = redis.NewScript(claimDueLua)

	//go:embed forget_idle_due.lua
	forgetIdleDueLua    string
	forgetIdleDueScript = redis.NewScript(forgetIdleDueLua)
)

// DueKey is the sorted set of the payment deadlines of a shard's orders.
func (l Layout) DueKey(shard int) string { return "seckill:due:" + l.tag(shard) }

// DueSetsKey is the registry of deadline sets the pollers read; a store
// with a deployment name keeps its own, as for the streams.
const DueSetsKey = "seckill:due-sets"

// Deadline is one order's end of payment window.
type Deadline struct {
	Product int64
	Shard   int
	Order   idgen.ID
	Due     time.Time
}

// Schedule adds deadlines to their shards' sets, in one round trip.
func (dl *Deadlines) Schedule(ctx context.Context, ds []Deadline) error {
	if len(ds) == 0 {
		return nil
	}
	_, err := dl.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, d := range ds {
			key := Layout{ID: d.Product}.DueKey(d.Shard)
			// The millisecond at or after the deadline: a claim at the
			// score must not come before the row's due time.
			ms := (d.Due.UnixNano() + int64(time.Millisecond) - 1) / int64(time.Millisecond)
			pipe.ZAdd(ctx, key, redis.Z{Score: float64(ms), Member: d.Order.String()})
			pipe.SAdd(ctx, dl.dueSets, key)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("scheduling %d payment deadlines: %w", len(ds), err)
	}
	return nil
}

// DueSets lists the deadline sets that may hold deadlines.
func (dl *Deadlines) DueSets(ctx context.Context) ([]string, error) {
	keys, err := dl.rdb.SMembers(ctx, dl.dueSets).Result()
	if err != nil {
		return nil, fmt.Errorf("listing the deadline sets: %w", err)
	}
	return keys, nil
}

// ClaimDue claims up to n orders of a set whose deadline is past, for lease.
func (dl *Deadlines) ClaimDue(ctx context.Context, key string, now time.Time, lease time.Duration, n int) ([]idgen.ID, error) {
	raw, err := claimDueScript.Run(ctx, dl.rdb, []string{key}, now.UnixMilli(), lease.Milliseconds(), n).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("claiming the deadlines of %s: %w", key, err)
	}
	ids := make([]idgen.ID, 0, len(raw))
	for _, r := range raw {
		id, err := idgen.ParseID(r)
		if err != nil {
			return nil, fmt.Errorf("deadline set %s: %w", key, err)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// Unschedule removes orders from a set: their windows are settled.
func (dl *Deadlines) Unschedule(ctx context.Context, key string, ids ...idgen.ID) error {
	if len(ids) == 0 {
		return nil
	}
	members := make([]any, len(ids))
	for i, id := range ids {
		members[i] = id.String()
	}
	if err := dl.rdb.ZRem(ctx, key, members...).Err(); err != nil {
		return fmt.Errorf("settling deadlines of %s: %w", key, err)
	}
	return nil
}

// ForgetIdleDueSets drops the empty deadline sets from the registry. On a
// Redis Cluster it drops none: a set and the registry are in different
// slots, so the check and the drop cannot be one step, and a deadline
// scheduled between them would sit in a set nobody reads. The registry
// then keeps a member per product shard sold with a payment window.
func (dl *Deadlines) ForgetIdleDueSets(ctx context.Context) error {
	if dl.store.split() {
		return nil
	}
	keys, err := dl.DueSets(ctx)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := forgetIdleDueScript.Run(ctx, dl.rdb, []string{k, dl.dueSets}).Err(); err != nil {
			return fmt.Errorf("dropping deadline set %s: %w", k, err)
		}
	}
	return nil
}

// DueKeyOf returns the deadline set of an order's shard.
func DueKeyOf(product int64, shard int) string { return Layout{ID: product}.DueKey(shard) }
