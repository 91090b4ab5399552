package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/lock"
	"seckill/internal/order"
	"seckill/internal/stock"
)

// The repair runs at once when the service sees a Redis server change
// under it, not only on the reconciler's schedule: a master at an address
// met before answering with another run id or replication id on a new
// connection (a restart, a replica promoted there), or, on a cluster, a
// slot whose master changed. Until a product is repaired after the last
// change seen, its purchases wait for the repair (one per product and
// process, started by the first of them) and answer order.ErrRebuilding when it
// takes longer than a step: no unit a forgotten take held is sold before
// it is taken back. A process that starts after the change has met no
// server before: its reconciler's first pass repairs.
type repairGate struct {
	changes atomic.Uint64 // server changes seen
	mu      sync.Mutex
	servers map[string]string // address → the run id and replication id met there
	flights sync.Map          // int64 → *repairFlight
}

// repairFlight is one product's repair in this process.
type repairFlight struct {
	mu      sync.Mutex
	done    uint64        // the changes seen when the last repair that succeeded began
	running chan struct{} // closed when the repair running ends; nil when none runs
}

// ServerSeen is the part of the Redis client's connection hook that tells
// a server change: a master whose run id and replication id are not those
// met at its address before.
func (rec *Reconciler) ServerSeen(ctx context.Context, cn *redis.Conn) error {
	info, err := cn.Info(ctx, "server", "replication").Result()
	var reply redis.Error
	switch {
	case errors.As(err, &reply):
		return nil // the embedded Redis: it runs in this process and cannot restart without it
	case err != nil:
		return fmt.Errorf("reading the run id of a new Redis connection: %w", err)
	}
	var runID, replID, role string
	for line := range strings.Lines(info) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch k {
		case "run_id":
			runID = v
		case "master_replid":
			replID = v
		case "role":
			role = v
		}
	}
	if runID == "" {
		return nil
	}
	g := &rec.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.servers == nil {
		g.servers = make(map[string]string)
	}
	addr, id := cn.String(), runID+" "+replID
	if was, met := g.servers[addr]; met && was != id && role == "master" {
		rec.log.Warn("Redis changed under the service (a restart, a promotion): repairing the products before they sell again", "server", addr)
		g.changes.Add(1)
	}
	g.servers[addr] = id
	return nil
}

// watchMasters reads a cluster's slot map every masterPoll and counts a
// change whenever a slot's master is another node: a failover, forced or
// not, promotes a replica on which connections may already be open, so the
// connection hook does not see it.
func (rec *Reconciler) watchMasters(cc *redis.ClusterClient) {
	t := time.NewTicker(masterPoll)
	defer t.Stop()
	var last string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), rec.opt.Step)
		slots, err := cc.ClusterSlots(ctx).Result()
		cancel()
		if err == nil {
			var b strings.Builder
			slices.SortFunc(slots, func(a, b redis.ClusterSlot) int { return a.Start - b.Start })
			for _, sl := range slots {
				if len(sl.Nodes) > 0 {
					fmt.Fprintf(&b, "%d-%d:%s ", sl.Start, sl.End, sl.Nodes[0].ID)
				}
			}
			if now := b.String(); now != last {
				if last != "" {
					rec.log.Warn("a Redis Cluster slot has a new master: repairing the products before they sell again")
					rec.gate.changes.Add(1)
				}
				last = now
			}
		}
		select {
		case <-rec.stop:
			return
		case <-t.C:
		}
	}
}

// masterPoll is how often a process reads the cluster's slot map for a
// new master.
const masterPoll = 200 * time.Millisecond

// AwaitRepair returns once product id was repaired after the last server
// change seen, starting the repair if none runs; order.ErrRebuilding if that
// takes longer than a step, or fails.
func (rec *Reconciler) AwaitRepair(ctx context.Context, id int64) (uint64, error) {
	want := rec.gate.changes.Load()
	if want == 0 {
		return 0, nil
	}
	v, _ := rec.gate.flights.LoadOrStore(id, new(repairFlight))
	f := v.(*repairFlight)
	f.mu.Lock()
	if f.done >= want {
		f.mu.Unlock()
		return want, nil
	}
	if f.running == nil {
		done, err := rec.enter()
		if err != nil {
			f.mu.Unlock()
			return 0, err
		}
		f.running = make(chan struct{})
		go rec.runRepair(id, f, done)
	}
	running := f.running
	f.mu.Unlock()
	t := time.NewTimer(rec.opt.Step)
	defer t.Stop()
	select {
	case <-running:
	case <-t.C:
	case <-ctx.Done():
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done < want {
		return 0, fmt.Errorf("%w: product %d is being repaired after a change of its Redis", order.ErrRebuilding, id)
	}
	return want, nil
}

func (rec *Reconciler) runRepair(id int64, f *repairFlight, done func()) {
	defer done()
	seen := rec.gate.changes.Load()
	ctx, cancel := context.WithTimeout(context.Background(), rec.orders.Budget().Purchase())
	defer cancel()
	err := rec.repair(ctx, id)
	if err != nil {
		rec.log.Error("repairing a product after a change of its Redis", "product", id, "error", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		f.done = max(f.done, seen)
	}
	close(f.running)
	f.running = nil
}

// repair restores the takes of product id's live orders that its shards
// forgot.
func (rec *Reconciler) repair(ctx context.Context, id int64) error {
	p, err := rec.cat.Refresh(ctx, id)
	if err != nil || p.Store != string(stock.InRedis) {
		return err
	}
	var locker lock.Locker
	if order.ModeOf(p).Locked {
		if locker, err = rec.cat.Locker(p.Lock); err != nil {
			return err
		}
	}
	ledger, err := rec.stock.Ledgers().Entries(ctx, p.Stock().Layout)
	if err != nil {
		return err
	}
	r, err := rec.restoreForgotten(ctx, p, ledger, locker)
	if errors.Is(err, stock.ErrNotLaidOut) {
		return nil // the stock is gone: the first take finds so, and the product is rebuilt
	}
	if r.Restored+r.Short > 0 {
		rec.log.Warn("repaired a product after a change of its Redis", "product", id, "restored", r.Restored, "short", r.Short)
	}
	return err
}

// ChangedSince reports whether a server change was seen since gen, which
// AwaitRepair returned: a take that ran meanwhile may have taken a unit a
// forgotten take still holds.
func (rec *Reconciler) ChangedSince(gen uint64) bool { return rec.gate.changes.Load() != gen }
