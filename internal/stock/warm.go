package stock

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// purchaseScripts are the scripts a purchase may run: the takes of every
// mode kept in Redis, the cluster's claim around them, the replicated
// product's mark, the give-back of a take that failed after it, and the
// scheduling of its order's payment deadline.
var purchaseScripts = []string{
	takeLua, asyncLua, fencedReadLua, rmwWriteLua, giveBackLua,
	claimLua, settleLua, forgetLua, replicatedLua, scheduleLua,
}

// LoadScripts loads the purchase's scripts on the store's Redis, on every
// master of a cluster, one pipelined round trip per node. A script runs as
// EVALSHA and falls back to EVAL on NOSCRIPT, so nothing depends on it:
// it spares the first buyers of a sale that opens at once on a server
// that never ran them (a restart, a new master, SCRIPT FLUSH) a refused
// EVALSHA and a script sent in full each. A master promoted later has
// none until its first EVAL.
func (s *Store) LoadScripts(ctx context.Context) error {
	load := func(ctx context.Context, c redis.Cmdable) error {
		_, err := c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for _, src := range purchaseScripts {
				pipe.ScriptLoad(ctx, src)
			}
			return nil
		})
		return err
	}
	var err error
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return load(ctx, c) })
	} else {
		err = load(ctx, s.rdb)
	}
	if err != nil {
		return fmt.Errorf("loading the purchase's scripts: %w", err)
	}
	return nil
}
