package stock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"gorm.io/gorm"

	"seckill/internal/idgen"
	"seckill/internal/lock"
	"seckill/internal/telemetry"
)

var (
	//go:embed take.lua
	takeLua    string
	takeScript = redis.NewScript(takeLua)

	//go:embed fenced_read.lua
	fencedReadLua    string
	fencedReadScript = redis.NewScript(fencedReadLua)

	//go:embed rmw_write.lua
	rmwWriteLua    string
	rmwWriteScript = redis.NewScript(rmwWriteLua)

	//go:embed give_back.lua
	giveBackLua    string
	giveBackScript = redis.NewScript(giveBackLua)

	//go:embed async.lua
	asyncLua    string
	asyncScript = redis.NewScript(asyncLua)
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

// Request is one attempt to take a unit.
type Request struct {
	Product Product
	Ticket  Ticket
	Mode    Mode
	// Locker guards the rmw mode's read-modify-write; lua and db take no lock.
	Locker lock.Locker
	Lock   lock.Options
	// GiveBackWait is how long a give-back waits for the shard's lock. It
	// must outlast the longest a live holder may hold it: after that,
	// whoever holds the lock is a crashed holder that will never write, and
	// the unit goes back without it. Default: DefaultGiveBackWait.
	GiveBackWait time.Duration
	// Tx is the transaction the db and sqlrmw modes take in: the order is
	// written in it too, so the take and the order commit or roll back
	// together.
	Tx *gorm.DB
	// Hooks, when not nil, are called at the take's moments: the lab's
	// trace and faults. Nil for a sale to the public.
	Hooks *Hooks
	// Guard makes the rmw mode's write refuse a holder whose lock is no
	// longer its own (ErrLeaseLost, nothing written): the write checks, in
	// its script, that the lock key still names the lease (lock.HoldingOf),
	// or, for a lock that names no holder in the shard's Redis, the fence
	// with a token drawn at the read. A give-back then draws a token too.
	// In the sqlrmw mode the UPDATE requires the value the SELECT read.
	// Products sold to the public set it; lab products leave it off, so
	// that a holder paused past its lease shows what a lease alone allows.
	// A lease with a fencing token of its own is fenced either way.
	Guard bool
}

// DefaultGiveBackWait is Request.GiveBackWait's default.
const DefaultGiveBackWait = 15 * time.Second

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
	if !r.Product.Replicated || r.Mode.Store() != InRedis {
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
	if err := p.Accepts(r.Mode); err != nil {
		return Taken{}, err
	}
	st := s.state(p.ID)
	flag := st.flag.Load()
	if flag&1 == 1 {
		return Taken{}, ErrSoldOut
	}
	if !s.split() || r.Mode.Store() != InRedis {
		return s.takeAny(ctx, r, st, flag)
	}
	claim, err := s.claim(ctx, p, r.Ticket)
	if err != nil {
		return Taken{}, err
	}
	t, err := s.takeAny(ctx, r, st, flag)
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
		_ = s.forget(ctx, p, r.Ticket.User, claim, "")
	}
	return t, err
}

// takeAny tries the shards in turn from the one the round-robin counter
// picks.
func (s *Store) takeAny(ctx context.Context, r Request, st *state, flag uint64) (Taken, error) {
	p := r.Product
	first := int(st.next.Add(1) % uint64(p.Shards))
	tries := 1
	if p.Fallback {
		tries = p.Shards
	}
	var t Taken
	for i := range tries {
		t.Entry = newEntry(r.Ticket, (first+i)%p.Shards, time.Now())
		t.Entry.MQ = r.Mode == MQ
		ok, err := s.takeFrom(ctx, r, &t)
		if err != nil || ok {
			return t, err
		}
	}
	if p.Fallback {
		st.flag.CompareAndSwap(flag, flag|1)
	}
	return Taken{}, ErrSoldOut
}

// takeFrom tries the shard t names; false means the shard was empty. Each
// shard tried is a span of the purchase's trace (the shard choice).
func (s *Store) takeFrom(ctx context.Context, r Request, t *Taken) (bool, error) {
	ctx, span := telemetry.Start(ctx, "stock.shard")
	ok, err := s.takeFromShard(ctx, r, t)
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("seckill.shard", t.Shard), attribute.String("seckill.mode", string(r.Mode)),
			attribute.Bool("seckill.taken", ok))
		var before *TakenBefore
		if !errors.As(err, &before) { // the buyer's earlier take: an answer, not a failure
			telemetry.Fail(span, err)
		}
	}
	span.End()
	return ok, err
}

func (s *Store) takeFromShard(ctx context.Context, r Request, t *Taken) (bool, error) {
	p := r.Product
	switch r.Mode {
	case Lua, MQ:
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
	case Async:
		r.Hooks.sent(t.Shard)
		ok, err := s.takeAsync(ctx, r, t)
		r.Hooks.done(ok, err)
		return ok, err
	case DB:
		if r.Tx == nil {
			return false, errors.New("stock: the db mode takes in the order's transaction, and none was given")
		}
		r.Hooks.sent(t.Shard)
		res := r.Tx.Model(&Shard{}).
			Where("product_id = ? AND shard = ? AND stock > 0", p.ID, t.Shard).
			Update("stock", gorm.Expr("stock - 1"))
		r.Hooks.done(res.RowsAffected == 1, res.Error)
		if res.Error != nil {
			return false, fmt.Errorf("taking from SQL shard %d of product %d: %w", t.Shard, p.ID, res.Error)
		}
		return res.RowsAffected == 1, nil
	case RMW:
		return s.readModifyWrite(ctx, r, t)
	case SQLRMW:
		return s.sqlReadModifyWrite(ctx, r, t)
	}
	return false, fmt.Errorf("%w %q", ErrUnknownMode, r.Mode)
}

// takeAsync runs async.lua on the shard t names, queuing the order under
// the ticket's order id, drawn before the take (see async.lua). It is one
// script on one Redis and on a cluster alike; on a cluster a stream that
// was closed is enrolled first, and the script run again (registry.go).
func (s *Store) takeAsync(ctx context.Context, r Request, t *Taken) (bool, error) {
	p := r.Product
	if r.Ticket.Order == 0 {
		return false, errors.New("stock: an async take needs the order id drawn for it")
	}
	raw := r.Ticket.Order.String()
	stream := p.StreamKey(t.Shard)
	keys := []string{p.StockKey(t.Shard), p.LedgerKey(t.Shard), stream}
	if s.split() {
		keys = append(keys, p.ShardPendingKey(t.Shard), generationKey(stream))
	} else {
		keys = append(keys, PendingKey(r.Ticket.Order.Time()), p.BuyerKey(r.Ticket.User), s.streams)
	}
	var due int64
	if p.PayTimeout > 0 {
		due = t.At.Add(p.PayTimeout).UnixMilli()
	}
	// The enqueue is the script's: its span is the one the queued entry
	// names, for the consumer's batch to link to.
	ectx, span := telemetry.Start(ctx, "outbox.enqueue")
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(attribute.String("seckill.order_id", raw), attribute.String("messaging.destination.name", stream))
	}
	gen := ""
	for range maxReopens {
		res, err := asyncScript.Run(ectx, s.rdb, keys, r.Ticket.User, r.Ticket.Key, t.Shard, t.At.UnixMilli(),
			raw, pendingTTL.Milliseconds(), p.ID, p.Sale, Group, due, r.Hooks.queueKey(r.Ticket.Key), telemetry.TraceParent(ectx), gen).Slice()
		telemetry.Fail(span, err)
		if err != nil {
			return false, unanswered(fmt.Errorf("taking from shard %d of product %d: %w", t.Shard, p.ID, err))
		}
		if code, _ := res[0].(int64); code != replyClosed {
			return s.reply(p, t.Shard, r.Ticket.User, res)
		}
		// The stream is closed: enrol it at its generation, and open it
		// with the take, unless a consumer closed it again meanwhile.
		gen, _ = res[1].(string)
		if err := s.enrol(ctx, s.streams, stream, gen); err != nil {
			return false, err
		}
	}
	return false, fmt.Errorf("taking from shard %d of product %d: its stream %s was closed %d times during the take", t.Shard, p.ID, stream, maxReopens)
}

// maxReopens bounds the enrolments of one take. A drained stream is
// closed only after it took no order for a while (Queue.ForgetDrained),
// but a close of a stream enrolled and not opened yet moves its generation
// on too, and turns the take back once more; with the consumers' pass a
// few seconds apart a take meets that rarely, and maxReopens in a row
// means a closer running without pause. The take then gives up, having
// taken nothing.
const maxReopens = 5

// pendingTTL is how long a day's pending index lives after its first
// order: its day and at least one more, so that a process whose clock lags
// still finds it (the TTL idgen.Redis gives its day keys).
const pendingTTL = idgen.DefaultKeyTTL

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

// readModifyWrite is GET, check, write under the request's lock: three round
// trips plus the lock's own, and correct only if the lock really excludes.
func (s *Store) readModifyWrite(ctx context.Context, r Request, t *Taken) (taken bool, err error) {
	p := r.Product
	lease, err := s.acquire(ctx, r, t)
	if err != nil {
		return false, err
	}
	if r.Hooks.keepLock() {
		lock.Abandon(lease)
	} else {
		defer func() {
			r.Hooks.releasing()
			rerr := lease.Release(ctx)
			switch {
			case rerr == nil:
			case errors.Is(rerr, lock.ErrNotHeld):
				t.LeaseLost = true
				r.Hooks.leaseLost()
			case taken:
				// The write landed: failing now would strand the unit
				// between the store and the orders. The lock expires.
				t.ReleaseErr = rerr
			case err == nil:
				err = fmt.Errorf("releasing lock of shard %d: %w", t.Shard, rerr)
			}
		}()
	}
	if r.Hooks != nil {
		defer func() { r.Hooks.done(taken, err) }()
	}
	// A fenced lease reads through the fence too (see fenced_read.lua). A
	// guarded take checks that its lock names it at the write, or, when
	// its lock cannot be checked there, draws a token at the read.
	t.Token = lease.Token()
	var held lock.Holding
	if r.Guard && t.Token == 0 {
		var ok bool
		if held, ok = lock.HoldingOf(lease); !ok {
			t.Token = draw
		}
	}
	n, token, err := s.read(ctx, p, t.Shard, t.Token)
	t.Token = token
	if err != nil {
		return false, err
	}
	r.Hooks.read(n)
	if n <= 0 {
		return false, nil
	}
	if err := r.Hooks.inside(ctx); err != nil {
		return false, err
	}
	// A lease that knows it lapsed (etcd's session, the watchdog) writes
	// nothing: the unit stays in stock. The fence covers the holder that
	// does not know yet.
	select {
	case <-lock.Lost(lease):
		return false, fmt.Errorf("%w: shard %d of product %d: the lock's lease lapsed before the write", ErrLeaseLost, t.Shard, p.ID)
	default:
	}
	keys := append([]string{p.StockKey(t.Shard), p.FenceKey(t.Shard), p.LedgerKey(t.Shard), p.LockKey(t.Shard)}, s.buyerKeys(p.Layout, r.Ticket.User)...)
	r.Hooks.write(n - 1)
	res, err := rmwWriteScript.Run(ctx, s.rdb, keys, n-1, t.Token, r.Ticket.User, t.record(), held.Value, held.Field).Slice()
	if err != nil {
		return false, unanswered(fmt.Errorf("writing %s: %w", p.StockKey(t.Shard), err))
	}
	return s.reply(p, t.Shard, r.Ticket.User, res)
}

// acquire takes the shard's lock for a read-modify-write, counting the wait.
func (s *Store) acquire(ctx context.Context, r Request, t *Taken) (lock.Lease, error) {
	p := r.Product
	start := time.Now()
	actx, span := telemetry.Start(ctx, "lock.acquire")
	lease, err := r.Locker.Acquire(actx, p.LockKey(t.Shard), r.Lock)
	waited := time.Since(start)
	t.LockWait += waited
	if span.IsRecording() {
		span.SetAttributes(attribute.String("seckill.lock_key", p.LockKey(t.Shard)), attribute.Int64("seckill.lock_wait_us", waited.Microseconds()),
			attribute.Bool("seckill.obtained", err == nil))
		telemetry.Fail(span, err)
	}
	span.End()
	if errors.Is(err, lock.ErrNotObtained) {
		return nil, fmt.Errorf("%w: shard %d of product %d", ErrLockTimeout, t.Shard, p.ID)
	}
	if err != nil {
		return nil, fmt.Errorf("locking shard %d of product %d: %w", t.Shard, p.ID, err)
	}
	r.Hooks.acquired(t.Shard, lease.Token(), r.Lock.TTL)
	return lease, nil
}

// draw is the token a guarded holder without one reads with: the read
// draws it (see fenced_read.lua).
const draw = ^uint64(0)

// read is the GET of a read-modify-write: a plain GET, or through the fence
// for a holder with a token, or one that draws it (draw). It returns the
// value and the token it read with.
func (s *Store) read(ctx context.Context, p Product, shard int, token uint64) (int, uint64, error) {
	key := p.StockKey(shard)
	var raw string
	if token == 0 {
		v, err := s.rdb.Get(ctx, key).Result()
		if errors.Is(err, redis.Nil) {
			return 0, 0, fmt.Errorf("%w: %s is missing", ErrNotLaidOut, key)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("reading %s: %w", key, err)
		}
		raw = v
	} else {
		arg := token
		if token == draw {
			arg = 0
		}
		res, err := fencedReadScript.Run(ctx, s.rdb, []string{key, p.FenceKey(shard)}, arg).Slice()
		if err != nil {
			return 0, 0, fmt.Errorf("reading %s: %w", key, err)
		}
		if _, err := s.reply(p, shard, 0, res[:1]); err != nil {
			return 0, 0, err
		}
		raw, _ = res[1].(string)
		drawn, _ := res[2].(int64)
		token = uint64(drawn)
	}
	n, err := strconv.Atoi(raw)
	if err != nil {
		return 0, 0, fmt.Errorf("stock key %s holds %q: %w", key, raw, err)
	}
	return n, token, nil
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
// With a Locker the unit goes back under the shard's lock (lockToWrite).
func (s *Store) GiveBack(ctx context.Context, r Request, t Taken) (bool, error) {
	if r.Mode.Store() == InSQL {
		return false, nil
	}
	p := r.Product
	token, release, err := s.lockToWrite(ctx, r, t.Shard)
	if err != nil {
		return false, fmt.Errorf("locking shard %d of product %d to give a unit back: %w", t.Shard, p.ID, err)
	}
	defer release()
	// A guarded give-back without a token moves the fence on, for a holder
	// that drew its token at its read (see Request.Guard).
	drawn := 0
	if r.Guard && token == 0 {
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
	if n == 1 && s.split() {
		// A failure leaves a record whose take the ledger no longer
		// holds: the buyer's next claim finds it so and forgets it.
		_ = s.forget(ctx, p, r.Ticket.User, "", r.Ticket.Order.String())
	}
	if n == 1 {
		s.flags.Clear(p.ID)
	}
	return n == 1, nil
}

// lockToWrite takes, when r has a Locker, the shard's lock for a change of
// its stock outside a take (a give-back, a restore): one that lands between
// another holder's GET and write is overwritten, and under a fenced lock the
// change goes through the fence, so that a holder paused with an older token
// cannot overwrite it either. Only when the lock stays held past
// GiveBackWait, longer than any live holder holds it, does the change go
// ahead without it. It returns the token (0 for none) and the release.
func (s *Store) lockToWrite(ctx context.Context, r Request, shard int) (uint64, func(), error) {
	if r.Locker == nil {
		return 0, func() {}, nil
	}
	opt := lock.Options{TTL: r.Lock.TTL, Wait: r.GiveBackWait}
	if opt.Wait <= 0 {
		opt.Wait = DefaultGiveBackWait
	}
	lease, err := r.Locker.Acquire(ctx, r.Product.LockKey(shard), opt)
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
