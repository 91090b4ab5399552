package stock

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed restore.lua
	restoreLua    string
	restoreScript = redis.NewScript(restoreLua)
)

// Restoration is what Restore did with one take.
type Restoration int

// Restore's outcomes.
const (
	// Recorded: the ledger held the take already; nothing changed.
	Recorded Restoration = iota
	// Restored: the take is recorded again and its unit out of the stock.
	Restored
	// Short: the take is recorded again, and the shard had no unit left to
	// take back: its unit was sold a second time meanwhile, an oversell the
	// audit shows. The stock never goes below zero.
	Short
	// Conflict: the shard's ledger holds another take of the buyer, which
	// the reconciler returns if it never became an order; nothing changed.
	Conflict
)

// Restore records again a take the shard's ledger lost, whose order
// exists (a Redis back from a persistence file that lost its last writes,
// a replica promoted without its master's last takes), and takes its unit
// out of the stock, in one atomic step: once, however often it runs. On
// one Redis the buyer's key is written too unless it holds something; on a
// cluster the caller settles the buyer keys after (SettleBuyers). With a
// write lock (the rmw mode's taker) it changes the stock under the shard's lock, as a
// give-back does.
func (s *Store) Restore(ctx context.Context, r Request, e Entry) (Restoration, error) {
	p := r.Product
	token, release, err := s.lockToWrite(ctx, r, e.Shard)
	if err != nil {
		return 0, fmt.Errorf("locking shard %d of product %d to restore a take: %w", e.Shard, p.ID, err)
	}
	defer release()
	// Guarded without a token: move the fence on, as GiveBack does.
	drawn := 0
	if p.Guarded && token == 0 {
		drawn = 1
	}
	keys := append([]string{p.StockKey(e.Shard), p.FenceKey(e.Shard), p.LedgerKey(e.Shard), p.RepairKey(e.Shard)},
		s.buyerKeys(p.Layout, e.User)...)
	n, err := restoreScript.Run(ctx, s.rdb, keys, e.User, e.record(), token, drawn).Int()
	if err != nil {
		return 0, fmt.Errorf("restoring the take of order %s on shard %d of product %d: %w", e.Order, e.Shard, p.ID, err)
	}
	switch n {
	case 0:
		return Recorded, nil
	case 1:
		return Restored, nil
	case 2:
		return Short, nil
	case 3:
		return Conflict, nil
	case replyNotLaidOut:
		return 0, fmt.Errorf("%w: %s is missing", ErrNotLaidOut, p.StockKey(e.Shard))
	case replyStale:
		return 0, fmt.Errorf("%w: restoring a take on shard %d of product %d", ErrLeaseLost, e.Shard, p.ID)
	}
	return 0, fmt.Errorf("restoring a take on shard %d of product %d: unexpected script reply %d", e.Shard, p.ID, n)
}

// Repairs are a layout's restorations so far, over all shards.
type Repairs struct {
	Restored int // takes recorded again with their unit taken back
	Short    int // takes recorded again whose unit was gone
}

func (r *Repairs) add(vals []any) {
	for i, v := range vals {
		s, _ := v.(string)
		n, _ := strconv.Atoi(s)
		if i == 0 {
			r.Restored += n
		} else {
			r.Short += n
		}
	}
}
