package stock

import (
	"context"
	_ "embed"
	"errors"
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

	//go:embed schedule.lua
	scheduleLua    string
	scheduleScript = redis.NewScript(scheduleLua)

	//go:embed close_due.lua
	closeDueLua    string
	closeDueScript = redis.NewScript(closeDueLua)
)

// DueKey is the sorted set of the payment deadlines of a shard's orders.
func (l Layout) DueKey(shard int) string { return "seckill:due:" + l.tag(shard) }

// dueOpenKey marks, on a Redis Cluster, a deadline set open and holds when
// it last took a deadline: an empty sorted set is no key in Redis, so the
// set cannot say it was opened and is merely empty. It is in the set's slot.
func dueOpenKey(set string) string { return set + ":open" }

// DueSetsKey is the registry of deadline sets the pollers read, a hash of
// set → the generation it was enrolled at (registry.go); a store with a
// deployment name keeps its own, as for the streams. Its name is not the
// SET's that came before it, so that one left on a shared Redis never
// answers WRONGTYPE.
const DueSetsKey = "seckill:deadline-sets"

// DefaultDueIdle is how long, on a Redis Cluster, an empty deadline set
// must have taken no deadline before ForgetIdleDueSets closes it: a
// schedule that finds its set closed costs two more round trips
// (registry.go), and a synchronous purchase schedules its order's deadline
// before it answers. On one Redis there is no such cost, and an empty set
// closes at once.
const DefaultDueIdle = 30 * time.Second

// Idle sets how long an empty deadline set stays open on a Redis Cluster
// (DefaultDueIdle); 0 closes it as soon as it is empty.
func (dl *Deadlines) Idle(d time.Duration) *Deadlines {
	dl.idle = max(d, 0)
	return dl
}

// Deadline is one order's end of payment window.
type Deadline struct {
	Product int64
	Shard   int
	Order   idgen.ID
	Due     time.Time
}

// dueBatch is the deadlines of one set a schedule sends in one script.
type dueBatch struct {
	set   string
	pairs []any  // score (ms), order id, ...
	gen   string // the generation the set was enrolled at; "" expects it open
}

// Schedule adds deadlines to their shards' sets: one script per set,
// pipelined, one round trip per node. On a cluster the sets found closed
// are enrolled at their generations, a round trip each, and scheduled
// again in one more pipeline (registry.go). A set that could not be
// scheduled is in the error, and the others are scheduled still.
func (dl *Deadlines) Schedule(ctx context.Context, ds []Deadline) error {
	if len(ds) == 0 {
		return nil
	}
	pending := batchDeadlines(ds)
	var errs []error
	// Bounded as a take's reopens (maxReopens): a schedule is sent back
	// only by a close between its reading of the generation and its open,
	// a round trip or two, so one sent back every round meets a closer
	// that runs without pause.
	for round := 0; len(pending) > 0; round++ {
		if round == maxReopens {
			errs = append(errs, fmt.Errorf("%d deadline sets were closed %d times during the schedule", len(pending), maxReopens))
			break
		}
		var again []*dueBatch
		for i, cmd := range runPipelined(ctx, dl.rdb, scheduleScript, dl.scheduleCalls(pending)) {
			b := pending[i]
			reopen, err := dl.scheduled(ctx, b, cmd)
			if err != nil {
				errs = append(errs, err)
			}
			if reopen {
				again = append(again, b)
			}
		}
		pending = again
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("scheduling %d payment deadlines: %w", len(ds), err)
	}
	return nil
}

// batchDeadlines groups deadlines by set, in the order the sets come.
func batchDeadlines(ds []Deadline) []*dueBatch {
	var batches []*dueBatch
	by := map[string]*dueBatch{}
	for _, d := range ds {
		set := Layout{ID: d.Product}.DueKey(d.Shard)
		b := by[set]
		if b == nil {
			b = &dueBatch{set: set}
			by[set] = b
			batches = append(batches, b)
		}
		// The millisecond at or after the deadline: a claim at the score
		// must not come before the row's due time.
		ms := (d.Due.UnixNano() + int64(time.Millisecond) - 1) / int64(time.Millisecond)
		b.pairs = append(b.pairs, ms, d.Order.String())
	}
	return batches
}

// scheduleCalls are schedule.lua's runs for batches.
func (dl *Deadlines) scheduleCalls(batches []*dueBatch) []scriptCall {
	calls := make([]scriptCall, len(batches))
	for i, b := range batches {
		keys := []string{b.set, dl.sets}
		if dl.split {
			keys = []string{b.set, dueOpenKey(b.set), GenerationKey(b.set)}
		}
		calls[i] = scriptCall{keys: keys, args: append([]any{b.gen}, b.pairs...)}
	}
	return calls
}

// scheduled reads schedule.lua's reply for b. A set found closed is
// enrolled at the generation the reply names, and reported to be
// scheduled again with it.
func (dl *Deadlines) scheduled(ctx context.Context, b *dueBatch, cmd *redis.Cmd) (reopen bool, err error) {
	res, err := cmd.Slice()
	if err != nil {
		return false, fmt.Errorf("scheduling %d deadlines on %s: %w", len(b.pairs)/2, b.set, err)
	}
	if code, _ := res[0].(int64); code != replyClosed || len(res) < 2 {
		return false, nil
	}
	b.gen, _ = res[1].(string)
	if err := Enrol(ctx, dl.rdb, dl.sets, b.set, b.gen); err != nil {
		return false, err
	}
	return true, nil
}

// DueSets lists the deadline sets that may hold deadlines: every open set
// is among them (registry.go).
func (dl *Deadlines) DueSets(ctx context.Context) ([]string, error) {
	keys, err := registered(ctx, dl.rdb, dl.sets)
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

// ForgetIdleDueSets closes the registered deadline sets that hold no
// deadline, and, on a Redis Cluster, took none for Idle: one script per
// set, pipelined, then on a cluster each closed set dropped from the
// registry at the generation its close gave (registry.go). The next
// schedule on a closed set opens it again. It returns how many sets left
// the registry; a set it could not close is in the error, and the others
// are closed still.
func (dl *Deadlines) ForgetIdleDueSets(ctx context.Context) (int, error) {
	sets, err := dl.DueSets(ctx)
	if err != nil || len(sets) == 0 {
		return 0, err
	}
	idle := time.Duration(0)
	if dl.split {
		idle = dl.idle
	}
	calls := make([]scriptCall, len(sets))
	for i, set := range sets {
		calls[i] = scriptCall{keys: dl.closeKeys(set), args: []any{idle.Milliseconds()}}
	}
	n := 0
	var errs []error
	for i, cmd := range runPipelined(ctx, dl.rdb, closeDueScript, calls) {
		left, err := dl.closed(ctx, sets[i], cmd)
		if err != nil {
			errs = append(errs, err)
		}
		if left {
			n++
		}
	}
	return n, errors.Join(errs...)
}

// closeKeys are close_due.lua's keys for set.
func (dl *Deadlines) closeKeys(set string) []string {
	if dl.split {
		return []string{set, dueOpenKey(set), GenerationKey(set)}
	}
	return []string{set, dl.sets}
}

// closed reads close_due.lua's reply for set and, on a cluster, drops a
// closed set from the registry. It reports whether set left the registry.
func (dl *Deadlines) closed(ctx context.Context, set string, cmd *redis.Cmd) (bool, error) {
	gen, err := cmd.Int64()
	if err != nil {
		return false, fmt.Errorf("closing deadline set %s: %w", set, err)
	}
	if gen == 0 {
		return false, nil
	}
	if !dl.split {
		return true, nil
	}
	return Unenrol(ctx, dl.rdb, dl.sets, set, gen)
}

// DueKeyOf returns the deadline set of an order's shard.
func DueKeyOf(product int64, shard int) string { return Layout{ID: product}.DueKey(shard) }
