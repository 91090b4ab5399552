package stock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed replicated.lua
	replicatedLua    string
	replicatedScript = redis.NewScript(replicatedLua)
)

// ErrNotReplicated: a replicated product's take is on the shard's master
// and no replica acknowledged it within ReplicaWait (or the master could
// not be asked). The take stands on the master, so the purchase's outcome
// is unknown: a failover now would lose it.
var ErrNotReplicated = errors.New("stock: the take reached no replica")

// ReplicaWait bounds a replicated product's WAIT after each take.
const ReplicaWait = time.Second

// awaitReplica holds a replicated product's take until a replica has it:
// WAIT 1 on the connection of a write that follows the take on the
// shard's master (replicated.lua). WAIT has no key, so on a cluster it
// runs on the master the slot map names for the shard, where the take ran.
// One round trip, plus the replica's acknowledgement.
func (s *Store) awaitReplica(ctx context.Context, p Product, shard int, user int64) error {
	var node redis.Cmdable = s.rdb
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		m, err := cc.MasterForKey(ctx, p.LedgerKey(shard))
		if err != nil {
			return fmt.Errorf("%w: finding the master of shard %d of product %d: %w", ErrNotReplicated, shard, p.ID, err)
		}
		node = m
	}
	var there *redis.Cmd
	var acked *redis.Cmd
	_, err := node.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		there = replicatedScript.Eval(ctx, pipe, []string{p.LedgerKey(shard), p.ReplicaMarkKey(shard)}, user)
		// Pipeliner has no Wait; the client's read timeout must outlast it.
		acked = pipe.Do(ctx, "WAIT", 1, ReplicaWait.Milliseconds())
		return nil
	})
	found, _ := there.Int()
	replicas, _ := acked.Int()
	switch {
	case err != nil:
		return fmt.Errorf("%w: shard %d of product %d: %w", ErrNotReplicated, shard, p.ID, err)
	case found != 1:
		return fmt.Errorf("%w: shard %d of product %d: its master no longer holds the take", ErrNotReplicated, shard, p.ID)
	case replicas < 1:
		return fmt.Errorf("%w: shard %d of product %d: no replica acknowledged it within %s", ErrNotReplicated, shard, p.ID, ReplicaWait)
	}
	return nil
}
