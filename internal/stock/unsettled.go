package stock

import (
	"context"
	"fmt"
	"sync/atomic"
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

// MarkedChannel carries the id of a product whose unsettled orders were
// marked: every process that follows it (the catalogue's notices) forgets
// that it knew the product had none (Ledgers.Marked).
const MarkedChannel = "seckill:unsettled-marked"

// MarkUnsettled records that the orders' purchases ended with their
// outcome unknown, and tells every process so on MarkedChannel: one round
// trip, the set, its expiry and the notice in one MULTI/EXEC, so that no
// mark lands untold. (On a cluster the notice, which names no key, runs
// in the set's transaction, and Redis Cluster carries it to every node.)
func (lg *Ledgers) MarkUnsettled(ctx context.Context, l Layout, orders ...idgen.ID) error {
	if len(orders) == 0 {
		return nil
	}
	k := l.UnsettledKey()
	_, err := lg.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.SAdd(ctx, k, members(orders)...)
		pipe.Expire(ctx, k, unsettledTTL)
		pipe.Publish(ctx, MarkedChannel, l.ID)
		return nil
	})
	if err != nil {
		return fmt.Errorf("marking %d orders of product %d unsettled: %w", len(orders), l.ID, err)
	}
	// This process knows of its own mark without its notice, which may
	// come late or never (a subscription to a node just paused, in a
	// failover): a "none" read it keeps from before the mark landed must
	// not answer a final sold out meanwhile.
	lg.Marked(l.ID)
	return nil
}

// AnyUnsettled reports whether the layout has orders marked unsettled:
// from memory when the process learned "none" less than SettledFresh ago
// and heard of no mark since (KnownSettled), else from Redis, where a
// "none" read is kept.
func (lg *Ledgers) AnyUnsettled(ctx context.Context, l Layout) (bool, error) {
	if lg.KnownSettled(l) {
		return false, nil
	}
	w := lg.settledWord(l.ID)
	heard := w.marks.Load()
	n, err := lg.rdb.SCard(ctx, l.UnsettledKey()).Result()
	if err != nil {
		return false, fmt.Errorf("reading the unsettled orders of product %d: %w", l.ID, err)
	}
	if n == 0 {
		w.known.Store(&settled{marks: heard, epoch: l.Epoch, at: time.Now()})
	}
	return n > 0, nil
}

// SettledFresh bounds how long a process answers "no unsettled orders"
// from memory. A mark's notice is missed only when the subscription broke
// (after which the process forgets all it knew: ForgetSettled) or a notice
// was dropped on the way, and then a sold out is told final wrongly for
// at most this long. It costs one SCARD a product a process a second.
const SettledFresh = time.Second

// SettledFor sets how long a read that found no unsettled order is
// trusted without a notice of a mark: a test that must see the notices
// work sets it long. Default: SettledFresh.
func (s *Store) SettledFor(d time.Duration) *Store {
	if d > 0 {
		s.ledgers.fresh = d
	}
	return s
}

// KnownSettled reports, without a round trip, that layout l had no
// unsettled orders when Redis was last asked, less than SettledFresh ago,
// and that no mark of its product was heard of since.
func (lg *Ledgers) KnownSettled(l Layout) bool {
	w := lg.settledWord(l.ID)
	k := w.known.Load()
	return k != nil && k.marks == w.marks.Load() && k.epoch == l.Epoch && time.Since(k.at) < lg.fresh
}

// Marked forgets that product id was known to have no unsettled orders:
// a mark's notice (MarkedChannel).
func (lg *Ledgers) Marked(id int64) { lg.settledWord(id).marks.Add(1) }

// ForgetSettled forgets every product known to have no unsettled orders:
// the notices were not followed for a while.
func (lg *Ledgers) ForgetSettled() {
	lg.settled.Range(func(_, w any) bool {
		w.(*settledWord).marks.Add(1)
		return true
	})
}

// settledWord is what the process knows of a product's unsettled orders:
// the marks it heard of, and the last read that found none. That read
// stands while no mark was heard of since it began, as a sold-out flag is
// set only if no unit came back while the shards were read.
type settledWord struct {
	marks atomic.Uint64
	known atomic.Pointer[settled]
}

// settled is a read that found no unsettled order in the layout of epoch,
// at at, begun when marks marks had been heard of.
type settled struct {
	marks uint64
	epoch int64
	at    time.Time
}

// settledWord is product id's word.
func (lg *Ledgers) settledWord(id int64) *settledWord {
	if w, ok := lg.settled.Load(id); ok {
		return w.(*settledWord)
	}
	w, _ := lg.settled.LoadOrStore(id, new(settledWord))
	return w.(*settledWord)
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
