package stock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"

	"seckill/internal/lock"
	"seckill/internal/telemetry"
)

var (
	//go:embed take.lua
	takeLua    string
	takeScript = redis.NewScript(takeLua)

	//go:embed give_back.lua
	giveBackLua    string
	giveBackScript = redis.NewScript(giveBackLua)
)

// TakeScript is the lua mode's script (see take.lua). Exported so that the
// load harness can measure a bare EVALSHA of it as a ceiling.
func TakeScript() *redis.Script { return takeScript }

// Replies of the scripts.
const (
	replyTaken       = 1
	replyEmpty       = 0
	replyTakenBefore = -1
	replyNotLaidOut  = -2
	replyStale       = -3
	replyClosed      = -4 // async.lua on a cluster: the stream is closed, enrol it
	replyNotHolder   = -5 // rmw_write.lua: the lock no longer names the holder
)

// Request is one attempt to take a unit: for whom, and how (the mode's
// Taker, which holds whatever else its way of taking needs).
type Request struct {
	Product Product
	Ticket  Ticket
	Taker   Taker
	// Hooks, when not nil, are called at the take's moments: the lab's
	// trace and faults. Nil for a sale to the public.
	Hooks *Hooks
}

// Taken describes a unit that was taken.
type Taken struct {
	Entry
	Token    uint64        // the fencing token the write carried, 0 if none
	LockWait time.Duration // time spent acquiring locks, over every shard tried
	// LeaseLost reports that the lock was no longer this holder's when it
	// released it: its lease expired inside the critical section.
	LeaseLost bool
	// ReleaseErr is a release that failed after the unit was taken. The
	// unit is taken all the same (the write landed); the lock expires.
	ReleaseErr error
	// Held is the sqlrmw mode's lock, still held when Take returns: the
	// caller releases it after the transaction's COMMIT. Nil otherwise.
	Held *Held
}

// Take takes one unit for r.Ticket. It starts at the shard the round-robin
// counter picks and, when the product allows fallback, tries the others in
// turn; it returns ErrSoldOut only when every shard it tried was empty. A
// take is idempotent per buyer: run again for a buyer who took a unit, it
// takes nothing and returns a *TakenBefore with that take's record. A
// replicated product's take in Redis, or the earlier take found, returns
// once a replica has it; else ErrNotReplicated, with the take in Taken.
func (s *Store) Take(ctx context.Context, r Request) (Taken, error) {
	t, err := s.take(ctx, r)
	if !r.Product.Replicated || r.Taker.Where() != InRedis {
		return t, err
	}
	var before *TakenBefore
	switch {
	case err == nil:
		if werr := s.awaitReplica(ctx, r.Product, t.Shard, r.Ticket.User); werr != nil {
			return t, werr
		}
	case errors.As(err, &before):
		if werr := s.awaitReplica(ctx, r.Product, before.Prior.Shard, r.Ticket.User); werr != nil {
			t.Entry = before.Prior
			return t, werr
		}
	}
	return t, err
}

func (s *Store) take(ctx context.Context, r Request) (Taken, error) {
	p := r.Product
	if r.Taker.Where() != p.Where {
		return Taken{}, fmt.Errorf("%w: product %d keeps its stock in %s; this take takes from %s", ErrWrongStore, p.ID, p.Where, r.Taker.Where())
	}
	w := s.flags.word(p.ID)
	flag := w.Load()
	if flag&1 == 1 {
		return Taken{}, ErrSoldOut
	}
	if !s.split || r.Taker.Where() != InRedis {
		return s.takeAny(ctx, r, w, flag)
	}
	claim, err := s.claim(ctx, p, r.Ticket)
	if err != nil {
		return Taken{}, err
	}
	t, err := s.takeAny(ctx, r, w, flag)
	var before *TakenBefore
	switch {
	case err == nil:
		// The claim names the order: it stands as the buyer's record (see
		// claim.go), and the next purchase of the buyer settles it.
	case errors.As(err, &before):
		_ = s.settleClaim(ctx, p, r.Ticket.User, claim, before.Prior.record())
	case errors.Is(err, ErrOutcomeUnknown) && !lastDialFailed(err):
		// The take may have landed: the retry finds the claim its own,
		// and a later purchase finds it stale; both look in the ledgers.
	default:
		_ = forget(ctx, s.rdb, p, r.Ticket.User, claim, "")
	}
	return t, err
}

// takeAny tries the shards in turn from the one the round-robin counter
// picks.
func (s *Store) takeAny(ctx context.Context, r Request, w *flagWord, flag uint64) (Taken, error) {
	p := r.Product
	first := int(s.counter(p.ID).Add(1) % uint64(p.Shards))
	tries := 1
	if p.Fallback {
		tries = p.Shards
	}
	var t Taken
	for i := range tries {
		t.Entry = newEntry(r.Ticket, (first+i)%p.Shards, time.Now())
		ok, err := s.takeFrom(ctx, r, &t)
		if err != nil || ok {
			return t, err
		}
	}
	if p.Fallback {
		w.CompareAndSwap(flag, flag|1)
	}
	return Taken{}, ErrSoldOut
}

// takeFrom tries the shard t names; false means the shard was empty. Each
// shard tried is a span of the purchase's trace (the shard choice).
func (s *Store) takeFrom(ctx context.Context, r Request, t *Taken) (bool, error) {
	ctx, span := telemetry.Start(ctx, "stock.shard")
	ok, err := r.Taker.takeShard(ctx, s, r, t)
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("seckill.shard", t.Shard), attribute.Bool("seckill.taken", ok))
		var before *TakenBefore
		if !errors.As(err, &before) { // the buyer's earlier take: an answer, not a failure
			telemetry.Fail(span, err)
		}
	}
	span.End()
	return ok, err
}

// reply turns a script's reply into a take's outcome.
func (s *Store) reply(p Product, shard int, user int64, res []any) (bool, error) {
	code, _ := res[0].(int64)
	switch code {
	case replyTaken:
		return true, nil
	case replyEmpty:
		return false, nil
	case replyTakenBefore:
		rec, _ := res[1].(string)
		prior, err := parseEntry(user, rec)
		if err != nil {
			return false, fmt.Errorf("buyer %d of product %d: %w", user, p.ID, err)
		}
		return false, &TakenBefore{Prior: prior}
	case replyNotLaidOut:
		return false, fmt.Errorf("%w: %s is missing", ErrNotLaidOut, p.StockKey(shard))
	case replyStale:
		return false, fmt.Errorf("%w: shard %d of product %d", ErrLeaseLost, shard, p.ID)
	case replyNotHolder:
		return false, fmt.Errorf("%w: shard %d of product %d: the lock no longer held this purchase's lease at the write", ErrLeaseLost, shard, p.ID)
	}
	return false, fmt.Errorf("shard %d of product %d: unexpected script reply %v", shard, p.ID, res)
}

// unanswered marks the failure of a write as ErrOutcomeUnknown, unless
// Redis answered it with an error (then the script did not run to its end,
// and a script writes nothing before its last checks). The errors the
// client retries on (LOADING from a Redis restarting, READONLY, TRYAGAIN,
// CLUSTERDOWN, MASTERDOWN) are the answer to the retry: the first run's
// reply was lost, and it may have taken a unit (a Redis killed after
// writing it to its append-only file), so those stay unknown.
func unanswered(err error) error {
	var reply redis.Error
	if errors.As(err, &reply) && !retriedReply(reply.Error()) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
}

// lastDialFailed reports whether the last try of a command failed to
// connect (its node is down). An earlier try may still have been sent, so
// this is not ErrOutcomeUnknown's opposite: a buyer's claim is forgotten on
// it all the same, because a take that did land without its order is
// returned by the reconciler, and keeping the claim would refuse the buyer
// for a whole claim window after every node loss.
func lastDialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func retriedReply(msg string) bool {
	for _, p := range []string{"LOADING ", "READONLY ", "TRYAGAIN ", "CLUSTERDOWN ", "MASTERDOWN "} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

func pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// GiveBack returns a unit that was taken but could not be sold to the shard
// it came from, and forgets the take, so that the unit is in the store again
// and the buyer may buy. It reports whether a unit went back: false when the
// ledger no longer holds the take (it was given back already, or the layout
// is gone). For stock in SQL there is nothing to do: the take rolls back
// with the order's transaction.
//
// A taker that reads and then writes gives the unit back under the shard's
// lock (lockToWrite).
func (s *Store) GiveBack(ctx context.Context, r Request, t Taken) (bool, error) {
	if r.Taker.Where() == InSQL {
		return false, nil
	}
	p := r.Product
	token, release, err := s.lockToWrite(ctx, r, t.Shard)
	if err != nil {
		return false, fmt.Errorf("locking shard %d of product %d to give a unit back: %w", t.Shard, p.ID, err)
	}
	defer release()
	// A guarded give-back without a token moves the fence on, for a holder
	// that drew its token at its read (see Product.Guarded).
	drawn := 0
	if p.Guarded && token == 0 {
		drawn = 1
	}
	keys := append([]string{p.StockKey(t.Shard), p.FenceKey(t.Shard), p.LedgerKey(t.Shard)}, s.buyerKeys(p.Layout, r.Ticket.User)...)
	n, err := giveBackScript.Run(ctx, s.rdb, keys, r.Ticket.User, r.Ticket.Order.String(), token, drawn).Int()
	if err != nil {
		return false, fmt.Errorf("giving a unit back to shard %d of product %d: %w", t.Shard, p.ID, err)
	}
	if n == replyStale {
		return false, fmt.Errorf("%w: giving a unit back to shard %d of product %d", ErrLeaseLost, t.Shard, p.ID)
	}
	if n == 1 && s.split {
		// A failure leaves a record whose take the ledger no longer
		// holds: the buyer's next claim finds it so and forgets it.
		_ = forget(ctx, s.rdb, p, r.Ticket.User, "", r.Ticket.Order.String())
	}
	if n == 1 {
		s.flags.Clear(p.ID)
	}
	return n == 1, nil
}

// lockToWrite takes, when r's taker has a write lock, the shard's lock for a change of
// its stock outside a take (a give-back, a restore): one that lands between
// another holder's GET and write is overwritten, and under a fenced lock the
// change goes through the fence, so that a holder paused with an older token
// cannot overwrite it either. Only when the lock stays held past
// GiveBackWait, longer than any live holder holds it, does the change go
// ahead without it. It returns the token (0 for none) and the release.
func (s *Store) lockToWrite(ctx context.Context, r Request, shard int) (uint64, func(), error) {
	l := r.Taker.writeLock()
	if l == nil {
		return 0, func() {}, nil
	}
	opt := lock.Options{TTL: l.Lock.TTL, Wait: l.GiveBackWait}
	if opt.Wait <= 0 {
		opt.Wait = DefaultGiveBackWait
	}
	lease, err := l.Locker.Acquire(ctx, r.Product.LockKey(shard), opt)
	switch {
	case errors.Is(err, lock.ErrNotObtained):
		// The holder is dead: nobody is between a GET and a write.
		return 0, func() {}, nil
	case err != nil:
		return 0, nil, err
	}
	// A lost lease changes nothing: the write is atomic.
	return lease.Token(), func() { lease.Release(ctx) }, nil
}
