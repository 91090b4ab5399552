package stock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/idgen"
)

// UnsettledKey is the set of the layout's order ids whose purchase ended
// with its outcome unknown (503 outcome_unknown): their units may come
// back once the reconciler settles them, so an empty store is not a final
// sold out while the set holds any.
func (l Layout) UnsettledKey() string {
	return "seckill:unsettled:{" + fmt.Sprint(l.ID) + "}" + l.epoch()
}

// unsettledTTL bounds how long a forgotten set outlives its layout.
const unsettledTTL = 24 * time.Hour

// MarkUnsettled records that the orders' purchases ended with their
// outcome unknown: one round trip (the set and its expiry in one
// MULTI/EXEC).
func (lg *Ledgers) MarkUnsettled(ctx context.Context, l Layout, orders ...idgen.ID) error {
	if len(orders) == 0 {
		return nil
	}
	k := l.UnsettledKey()
	_, err := lg.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.SAdd(ctx, k, members(orders)...)
		pipe.Expire(ctx, k, unsettledTTL)
		return nil
	})
	if err != nil {
		return fmt.Errorf("marking %d orders of product %d unsettled: %w", len(orders), l.ID, err)
	}
	return nil
}

// AnyUnsettled reports whether the layout has orders marked unsettled.
func (lg *Ledgers) AnyUnsettled(ctx context.Context, l Layout) (bool, error) {
	n, err := lg.rdb.SCard(ctx, l.UnsettledKey()).Result()
	if err != nil {
		return false, fmt.Errorf("reading the unsettled orders of product %d: %w", l.ID, err)
	}
	return n > 0, nil
}

// Unsettled returns the layout's orders marked unsettled.
func (lg *Ledgers) Unsettled(ctx context.Context, l Layout) (map[idgen.ID]bool, error) {
	raw, err := lg.rdb.SMembers(ctx, l.UnsettledKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("reading the unsettled orders of product %d: %w", l.ID, err)
	}
	ids := make(map[idgen.ID]bool, len(raw))
	for _, r := range raw {
		if id, err := idgen.ParseID(r); err == nil {
			ids[id] = true
		}
	}
	return ids, nil
}

// ForgetUnsettled drops orders from the layout's unsettled set.
func (lg *Ledgers) ForgetUnsettled(ctx context.Context, l Layout, orders []idgen.ID) error {
	if len(orders) == 0 {
		return nil
	}
	return lg.rdb.SRem(ctx, l.UnsettledKey(), members(orders)...).Err()
}

// members are the orders as a set's members.
func members(orders []idgen.ID) []any {
	m := make([]any, len(orders))
	for i, id := range orders {
		m[i] = id.String()
	}
	return m
}
