package stock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"

	"seckill/internal/lock"
	"seckill/internal/telemetry"
)

var (
	//go:embed fenced_read.lua
	fencedReadLua    string
	fencedReadScript = redis.NewScript(fencedReadLua)

	//go:embed rmw_write.lua
	rmwWriteLua    string
	rmwWriteScript = redis.NewScript(rmwWriteLua)
)

// RMW is GET, check, write under the shard's lock: three round trips plus
// the lock's own, and correct only if the lock really excludes. A guarded
// product's write refuses a holder whose lock is no longer its own
// (ErrLeaseLost, nothing written): the write checks, in its script, that
// the lock key still names the lease (lock.HoldingOf), or, for a lock that
// names no holder in the shard's Redis, the fence with a token drawn at the
// read (Product.Guarded).
type RMW struct{ Locked }

var _ Taker = RMW{}

// Where is Redis.
func (RMW) Where() Where { return InRedis }

func (m RMW) takeShard(ctx context.Context, s *Store, r Request, t *Taken) (taken bool, err error) {
	p := r.Product
	lease, err := s.acquire(ctx, r, m.Locked, t)
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
	if p.Guarded && t.Token == 0 {
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
func (s *Store) acquire(ctx context.Context, r Request, l Locked, t *Taken) (lock.Lease, error) {
	p := r.Product
	start := time.Now()
	actx, span := telemetry.Start(ctx, "lock.acquire")
	lease, err := l.Locker.Acquire(actx, p.LockKey(t.Shard), l.Lock)
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
	r.Hooks.acquired(t.Shard, lease.Token(), l.Lock.TTL)
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
