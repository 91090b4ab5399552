package stock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// One unit per buyer on a Redis Cluster. On one Redis, the take's script
// checks and writes the buyer's key in the same atomic step as the stock.
// On a cluster the buyer's key and the shards are in different slots (the
// shards on different nodes), and no script may span them, so a purchase
// first claims the buyer's key (claim.lua: SET with an expiry, unless it
// holds something), then takes from the shards, whose scripts check their
// ledger instead, then settles the claim into the take's record, for good
// (settle.lua), or forgets it when nothing was taken (forget.lua). See
// docs/INVARIANT.md, "On a Redis Cluster", for the windows this leaves.

var (
	//go:embed claim.lua
	claimLua    string
	claimScript = redis.NewScript(claimLua)

	//go:embed settle.lua
	settleLua    string
	settleScript = redis.NewScript(settleLua)

	//go:embed forget.lua
	forgetLua    string
	forgetScript = redis.NewScript(forgetLua)
)

// ErrInFlight: another purchase of the buyer holds the claim on the product
// and has not finished (on a Redis Cluster). It is ErrAlreadyBought to the
// caller: the buyer has a purchase of this product under way.
var ErrInFlight = fmt.Errorf("%w: another purchase of this buyer is in progress", ErrAlreadyBought)

// DefaultClaimTTL is how long a buyer's claim lives unsettled: longer than
// any purchase's time budget, so that a live purchase settles or forgets
// it first. A purchase that died between its claim and its take blocks its
// buyer for that long; one that died between its take and the settle lets
// the claim go, and the window of docs/INVARIANT.md opens.
const DefaultClaimTTL = 2 * time.Minute

const claimMark = "claim "

func claimOf(t Ticket) string { return claimMark + t.Key }

// split reports whether the buyer's key cannot share a script with the
// shards: on a Redis Cluster.
func (s *Store) split() bool {
	_, ok := s.rdb.(*redis.ClusterClient)
	return ok
}

// buyerKeys is the buyer's key as the shards' scripts take it: none on a
// cluster.
func (s *Store) buyerKeys(l Layout, user int64) []string {
	if s.split() {
		return nil
	}
	return []string{l.BuyerKey(user)}
}

// claim claims the buyer's key for t. It returns nil when the purchase may
// take: a new claim, or its own from an earlier attempt that took nothing.
// A take recorded already comes back as a *TakenBefore; another purchase's
// claim as ErrInFlight.
func (s *Store) claim(ctx context.Context, p Product, t Ticket) error {
	key := p.BuyerKey(t.User)
	for range 2 {
		prior, err := claimScript.Run(ctx, s.rdb, []string{key}, claimOf(t), s.claimTTL.Milliseconds()).Text()
		switch {
		case errors.Is(err, redis.Nil):
			return nil
		case err != nil:
			return fmt.Errorf("claiming buyer %d of product %d: %w", t.User, p.ID, err)
		case prior == claimOf(t):
			// This purchase's own, from an attempt whose outcome was
			// unknown: it may have taken, on any shard.
			e, found, err := s.findTake(ctx, p.Layout, t.User)
			if err != nil || !found {
				return err
			}
			_ = s.settle(ctx, p, t, e.record())
			return &TakenBefore{Prior: e}
		case strings.HasPrefix(prior, claimMark):
			return fmt.Errorf("%w (buyer %d, product %d)", ErrInFlight, t.User, p.ID)
		}
		e, err := parseEntry(t.User, prior)
		if err != nil {
			return fmt.Errorf("buyer %d of product %d: %w", t.User, p.ID, err)
		}
		// The key is written after the take and deleted after a give-back,
		// each a step apart: believe it only if the ledger holds the take.
		held, err := s.rdb.HGet(ctx, p.LedgerKey(e.Shard), strconv.FormatInt(t.User, 10)).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("reading the ledger of shard %d of product %d: %w", e.Shard, p.ID, err)
		}
		if held == prior {
			return &TakenBefore{Prior: e}
		}
		// Given back: the buyer may buy again, as on one Redis.
		if err := forgetScript.Run(ctx, s.rdb, []string{key}, prior, e.Order.String()).Err(); err != nil {
			return fmt.Errorf("forgetting buyer %d of product %d: %w", t.User, p.ID, err)
		}
	}
	return fmt.Errorf("%w (buyer %d, product %d)", ErrInFlight, t.User, p.ID)
}

// findTake looks for the buyer's take in every shard's ledger, in one
// round trip.
func (s *Store) findTake(ctx context.Context, l Layout, user int64) (Entry, bool, error) {
	field := strconv.FormatInt(user, 10)
	cmds := make([]*redis.StringCmd, l.Shards)
	_, err := s.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i := range cmds {
			cmds[i] = pipe.HGet(ctx, l.LedgerKey(i), field)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return Entry{}, false, fmt.Errorf("looking for buyer %d in the ledgers of product %d: %w", user, l.ID, err)
	}
	for _, c := range cmds {
		if rec, err := c.Result(); err == nil {
			e, err := parseEntry(user, rec)
			return e, err == nil, err
		}
	}
	return Entry{}, false, nil
}

// settle makes the claim the take's record. A failure leaves the claim to
// expire: the take stands, recorded in its shard's ledger, and the window
// of docs/INVARIANT.md is open until a later purchase of the buyer finds
// the take (claim's findTake) or not.
func (s *Store) settle(ctx context.Context, p Product, t Ticket, record string) error {
	n, err := settleScript.Run(ctx, s.rdb, []string{p.BuyerKey(t.User)}, claimOf(t), record).Int()
	if err != nil {
		return fmt.Errorf("settling the claim of buyer %d on product %d: %w", t.User, p.ID, err)
	}
	if n == 0 {
		return fmt.Errorf("settling the claim of buyer %d on product %d: another purchase claimed the buyer after this one's claim expired", t.User, p.ID)
	}
	return nil
}

// forget deletes the buyer's key if it holds t's claim or the record of the
// take of order.
func (s *Store) forget(ctx context.Context, p Product, t Ticket, order string) error {
	if err := forgetScript.Run(ctx, s.rdb, []string{p.BuyerKey(t.User)}, claimOf(t), order).Err(); err != nil {
		return fmt.Errorf("forgetting the claim of buyer %d on product %d: %w", t.User, p.ID, err)
	}
	return nil
}
