package stock

import (
	"context"
	"fmt"
)

// Lua takes with one script (take.lua): it checks the shard, decrements it
// and records the buyer, atomically; no lock.
type Lua struct {
	// Published: the order goes out through the message broker after the
	// take (the mq mode), outside the take's atomic step; the ledger
	// records the take as such (Entry.MQ).
	Published bool
}

var _ Taker = Lua{}

// Where is Redis.
func (Lua) Where() Where { return InRedis }

func (Lua) writeLock() *Locked { return nil }

func (l Lua) takeShard(ctx context.Context, s *Store, r Request, t *Taken) (bool, error) {
	p := r.Product
	t.MQ = l.Published
	keys := append([]string{p.StockKey(t.Shard), p.LedgerKey(t.Shard)}, s.buyerKeys(p.Layout, r.Ticket.User)...)
	r.Hooks.sent(t.Shard)
	res, err := takeScript.Run(ctx, s.rdb, keys, r.Ticket.User, t.record()).Slice()
	if err != nil {
		r.Hooks.done(false, err)
		return false, unanswered(fmt.Errorf("taking from shard %d of product %d: %w", t.Shard, p.ID, err))
	}
	ok, err := s.reply(p, t.Shard, r.Ticket.User, res)
	r.Hooks.done(ok, err)
	return ok, err
}
