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
// first claims the buyer's key (claim.lua: SET, unless it holds
// something), then takes from the shards, whose scripts check their ledger
// instead. A claim names its purchase's order: when the take lands, the
// claim stands as the buyer's record, with no third round trip to settle
// it; a purchase that finds it looks for the take in the ledgers, and
// settles it then (settle.lua). When nothing was taken the purchase
// forgets its claim (forget.lua). See docs/INVARIANT.md, "On a Redis
// Cluster", for the windows this leaves.

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

// DefaultClaimWindow is Store.ClaimWindow's default.
const DefaultClaimWindow = time.Minute

// ClaimWindow sets how long a purchase may hold its buyer's claim without
// a take: the longest a purchase runs (its time budget). A claim older than
// that whose take no ledger holds is a purchase that is over and took
// nothing (its process died, or an answer was lost): the next purchase of
// the buyer forgets it. Default: DefaultClaimWindow.
func (s *Store) ClaimWindow(d time.Duration) *Store {
	if d > 0 {
		s.claimWindow = d
	}
	return s
}

const claimMark = "claim "

// claimOf is t's claim: "claim <key> <millis> <order>", the key telling a
// retry of the same purchase, the time telling a claim that outlived its
// purchase, the order telling a give-back which claim is its take's.
func claimOf(t Ticket, at time.Time) string {
	return claimMark + t.Key + " " + strconv.FormatInt(at.UnixMilli(), 10) + " " + t.Order.String()
}

// parseClaim reads a claim back: its purchase's idempotency key and when it
// was made (by the clock of the process that made it: the window is tens of
// seconds, and the processes' clocks must agree to well within that).
func parseClaim(c string) (key string, at time.Time) {
	f := strings.Fields(c)
	if len(f) != 3 && len(f) != 4 { // 3: a claim from before claims named their order
		return "", time.Time{}
	}
	ms, _ := strconv.ParseInt(f[2], 10, 64)
	return f[1], time.UnixMilli(ms)
}

// claimOrder is the order a claim names; "" for a claim from before claims
// named their order.
func claimOrder(c string) string {
	if f := strings.Fields(c); len(f) == 4 {
		return f[3]
	}
	return ""
}

// buyerKeys is the buyer's key as the shards' scripts take it: none on a
// cluster.
func (s *Store) buyerKeys(l Layout, user int64) []string {
	if s.split {
		return nil
	}
	return []string{l.BuyerKey(user)}
}

// claim claims the buyer's key for t. It returns nil when the purchase may
// take: a new claim, or its own from an earlier attempt that took nothing.
// A take recorded already comes back as a *TakenBefore; another purchase's
// claim as ErrInFlight.
func (s *Store) claim(ctx context.Context, p Product, t Ticket) (string, error) {
	key := p.BuyerKey(t.User)
	mine := claimOf(t, time.Now())
	// Another purchase's claim is most often milliseconds from its take:
	// waiting for it lets this purchase answer as it would on one Redis,
	// with that purchase's order, rather than only "in progress".
	deadline := time.Now().Add(inFlightWait)
	for {
		prior, err := claimScript.Run(ctx, s.rdb, []string{key}, mine).Text()
		if errors.Is(err, redis.Nil) {
			return mine, nil
		}
		if err != nil {
			return "", fmt.Errorf("claiming buyer %d of product %d: %w", t.User, p.ID, err)
		}
		granted := false
		if strings.HasPrefix(prior, claimMark) {
			granted, err = s.claimed(ctx, p, t, prior, mine, deadline)
		} else {
			err = s.recorded(ctx, p, t, prior)
		}
		switch {
		case err != nil:
			return "", err
		case granted:
			return mine, nil
		}
	}
}

// claimed decides what the claim prior on t's buyer means for t, whose own
// claim would be mine. A claim is the record of a take that landed, or a
// purchase under way, or one that is over and took nothing: the ledgers
// tell which. It reports whether the claim is now mine; false with no
// error means to try again.
func (s *Store) claimed(ctx context.Context, p Product, t Ticket, prior, mine string, deadline time.Time) (bool, error) {
	key := p.BuyerKey(t.User)
	e, found, err := s.ledgers.FindTake(ctx, p.Layout, t.User)
	if err != nil {
		return false, err
	}
	if found {
		// Settled now, so that the buyer's next purchase reads one ledger,
		// not all of them.
		_ = s.settleClaim(ctx, p, t.User, prior, e.record())
		return false, &TakenBefore{Prior: e}
	}
	owner, at := parseClaim(prior)
	switch {
	case owner == t.Key:
		// This purchase's own, from an attempt that took nothing or whose
		// outcome was unknown and did not land. It is made this attempt's
		// (compare and set): its time, so that another purchase does not
		// find it stale while this take runs, and its order, which this
		// take's give-back or dead letter forgets it by.
		n, err := settleScript.Run(ctx, s.rdb, []string{key}, prior, mine).Int()
		if err != nil {
			return false, fmt.Errorf("renewing the claim of buyer %d on product %d: %w", t.User, p.ID, err)
		}
		return n == 1, nil
	case time.Since(at) > s.claimWindow:
		// A purchase that is over, and took nothing.
		if err := forgetScript.Run(ctx, s.rdb, []string{key}, prior, "").Err(); err != nil {
			return false, fmt.Errorf("forgetting a stale claim on buyer %d of product %d: %w", t.User, p.ID, err)
		}
	case time.Now().After(deadline):
		return false, fmt.Errorf("%w (buyer %d, product %d)", ErrInFlight, t.User, p.ID)
	default:
		if err := pause(ctx, inFlightPoll); err != nil {
			return false, fmt.Errorf("waiting for another purchase of buyer %d: %w", t.User, err)
		}
	}
	return false, nil
}

// recorded decides what the record prior of a take on t's buyer means: a
// *TakenBefore if the ledger still holds the take, else nil, the record
// forgotten, to try again.
func (s *Store) recorded(ctx context.Context, p Product, t Ticket, prior string) error {
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
	if err := forgetScript.Run(ctx, s.rdb, []string{p.BuyerKey(t.User)}, prior, e.Order.String()).Err(); err != nil {
		return fmt.Errorf("forgetting buyer %d of product %d: %w", t.User, p.ID, err)
	}
	return nil
}

// How long, and how often, a purchase looks again at another purchase's
// claim on its buyer before it answers ErrInFlight.
const (
	inFlightWait = time.Second
	inFlightPoll = 5 * time.Millisecond
)

// FindTake looks for the buyer's take in every shard's ledger, in one
// round trip.
func (lg *Ledgers) FindTake(ctx context.Context, l Layout, user int64) (Entry, bool, error) {
	field := strconv.FormatInt(user, 10)
	cmds := make([]*redis.StringCmd, l.Shards)
	_, err := lg.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
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

// settleClaim makes the claim the take's record. A failure leaves the
// claim: the take stands, recorded in its shard's ledger, and the buyer's
// next purchase finds it there (claim's FindTake).
func (s *Store) settleClaim(ctx context.Context, p Product, user int64, claim, record string) error {
	n, err := settleScript.Run(ctx, s.rdb, []string{p.BuyerKey(user)}, claim, record).Int()
	if err != nil {
		return fmt.Errorf("settling the claim of buyer %d on product %d: %w", user, p.ID, err)
	}
	if n == 0 {
		return fmt.Errorf("settling the claim of buyer %d on product %d: another purchase claimed the buyer after this one's claim was found stale", user, p.ID)
	}
	return nil
}

// forget deletes the buyer's key if it holds claim, or the record or claim
// of the take of order.
func forget(ctx context.Context, rdb redis.Cmdable, p Product, user int64, claim, order string) error {
	if err := forgetScript.Run(ctx, rdb, []string{p.BuyerKey(user)}, claim, order).Err(); err != nil {
		return fmt.Errorf("forgetting the claim of buyer %d on product %d: %w", user, p.ID, err)
	}
	return nil
}

// SettleBuyers makes, on a Redis Cluster, each buyer's key name its take in
// ledger where a step was missed (the settle of a purchase whose process
// died, or whose node was lost): a key that is empty, or holds the claim of
// the purchase that took. A key holding another purchase's claim is left
// to that purchase. On one Redis the take wrote the key itself: nothing
// to do. Two round trips, pipelined over the nodes.
func (s *Store) SettleBuyers(ctx context.Context, l Layout, ledger []Entry) error {
	if !s.split || len(ledger) == 0 {
		return nil
	}
	gets := make(map[int64]*redis.StringCmd, len(ledger))
	_, err := s.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, e := range ledger {
			if gets[e.User] == nil {
				gets[e.User] = pipe.Get(ctx, l.BuyerKey(e.User))
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("reading the buyers of product %d: %w", l.ID, err)
	}
	_, err = s.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, e := range ledger {
			user := e.User
			v, err := gets[user].Result()
			rec := e.record()
			switch {
			case err == nil && v == rec:
				continue
			case err == nil && strings.HasPrefix(v, claimMark):
				// Only the claim of the purchase that made this take: the
				// ledger was read before, and its take may have been given
				// back since, the buyer's key then claimed by a retry with
				// the same idempotency key and another order, whose take
				// this record must not hide.
				if owner, _ := parseClaim(v); owner != e.Key {
					continue
				}
				if order := claimOrder(v); order != "" && order != e.Order.String() {
					continue
				}
			case err == nil:
				continue // another take's record: the double window, left as it is
			}
			// EVAL, not EVALSHA: a pipeline does not fall back on NOSCRIPT.
			settleScript.Eval(ctx, pipe, []string{l.BuyerKey(user)}, v, rec)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("settling the buyers of product %d: %w", l.ID, err)
	}
	return nil
}
