package stock

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"seckill/internal/lock"
)

var (
	//go:embed take.lua
	takeLua    string
	takeScript = redis.NewScript(takeLua)

	//go:embed give_back.lua
	giveBackLua    string
	giveBackScript = redis.NewScript(giveBackLua)
)

// TakeScript is the lua mode's script: KEYS stock key and buyer set, ARGV
// the user id; it answers 1 taken, 0 empty, -1 already bought. Exported so
// that the load harness can measure a bare EVALSHA of it as a ceiling.
func TakeScript() *redis.Script { return takeScript }

// Shard is one shard's stock in SQL, for the db mode.
type Shard struct {
	ProductID int64 `gorm:"primaryKey;autoIncrement:false"`
	Shard     int   `gorm:"primaryKey;autoIncrement:false"`
	Stock     int   `gorm:"not null"`
}

// TableName keeps the table name stable whatever GORM's naming strategy.
func (Shard) TableName() string { return "product_shards" }

// Migrate creates the tables the db mode uses.
func Migrate(ctx context.Context, db *gorm.DB) error {
	if err := db.WithContext(ctx).AutoMigrate(&Shard{}); err != nil {
		return fmt.Errorf("migrating product_shards: %w", err)
	}
	return nil
}

// Product is what the store needs to know of a product.
type Product struct {
	ID       int64
	Shards   int
	Where    Where
	Fallback bool // try the other shards when the picked one is empty
}

// Accepts returns ErrWrongStore, explained, unless m takes its units from
// the store that holds p's stock.
func (p Product) Accepts(m Mode) error {
	if m.Store() == p.Where {
		return nil
	}
	return fmt.Errorf("%w: product %d keeps its stock in %s; mode %s takes from %s (reset the product with that mode)",
		ErrWrongStore, p.ID, p.Where, m, m.Store())
}

// Request is one attempt to take a unit.
type Request struct {
	Product Product
	UserID  int64
	Mode    Mode
	// Locker guards the rmw mode's read-modify-write; lua and db take no lock.
	Locker lock.Locker
	Lock   lock.Options
	// Hold pauses inside the critical section, between the read and the
	// write, to widen the race window or to outlive the lease.
	Hold time.Duration
	// Abandon leaves the lock held, as a holder that crashed would.
	Abandon bool
	// GiveBackWait is how long a give-back waits for the shard's lock. It
	// must outlast the longest a live holder may hold it (the largest Hold
	// allowed, plus round trips): after that, whoever holds the lock is a
	// crashed holder that will never write, and the unit goes back without
	// it. Default: 15s.
	GiveBackWait time.Duration
}

// DefaultGiveBackWait is Request.GiveBackWait's default.
const DefaultGiveBackWait = 15 * time.Second

// Taken describes a unit that was taken.
type Taken struct {
	Shard    int
	Token    uint64        // the fencing token the write carried, 0 if none
	LockWait time.Duration // time spent acquiring locks, over every shard tried
	// LeaseLost reports that the lock was no longer this holder's when it
	// released it: its lease expired inside the critical section.
	LeaseLost bool
	// ReleaseErr is a release that failed after the unit was taken. The
	// unit is taken all the same (the write landed); the lock expires.
	ReleaseErr error
}

// Store takes units of stock. It keeps, per product and per process, the
// round-robin counter and a sold-out flag that spares Redis the requests
// that would only find every shard empty.
type Store struct {
	rdb      redis.Cmdable
	db       *gorm.DB
	products sync.Map // int64 → *state
}

type state struct {
	next atomic.Uint64
	// flag is the sold-out flag in its lowest bit and, above it, the number
	// of times it was cleared. A purchase that found every shard empty sets
	// the flag only if no unit came back since it read the word, so a
	// give-back racing with that purchase's scan is never hidden.
	flag atomic.Uint64
}

func (st *state) clear() {
	for {
		w := st.flag.Load()
		if st.flag.CompareAndSwap(w, (w>>1+1)<<1) {
			return
		}
	}
}

// NewStore returns a store on rdb and db.
func NewStore(rdb redis.Cmdable, db *gorm.DB) *Store { return &Store{rdb: rdb, db: db} }

func (s *Store) state(id int64) *state {
	if st, ok := s.products.Load(id); ok {
		return st.(*state)
	}
	st, _ := s.products.LoadOrStore(id, new(state))
	return st.(*state)
}

// SoldOut reports the process's sold-out flag for a product.
func (s *Store) SoldOut(id int64) bool { return s.state(id).flag.Load()&1 == 1 }

// ClearSoldOut forgets the sold-out flag, after stock was added anywhere.
func (s *Store) ClearSoldOut(id int64) { s.state(id).clear() }

// ClearAllSoldOut forgets every product's flag, when stock may have come
// back unseen (a missed notice).
func (s *Store) ClearAllSoldOut() {
	s.products.Range(func(_, st any) bool {
		st.(*state).clear()
		return true
	})
}

// Layout sets a product's stock to total, split over its shards, in the store
// its mode uses; the other store is emptied, so a unit is in one place only.
// The buyers recorded by the lua mode are forgotten.
func (s *Store) Layout(ctx context.Context, p Product, total int) error {
	split := Split(total, p.Shards)
	inRedis, inSQL := split, make([]int, p.Shards)
	if p.Where == InSQL {
		inRedis, inSQL = inSQL, inRedis
	}
	// One MULTI/EXEC: no buyer sees half a layout. Shards beyond the new
	// count are removed so that a smaller layout leaves no stray stock.
	_, err := s.rdb.TxPipelined(ctx, func(tx redis.Pipeliner) error {
		old := make([]string, 0, MaxShards)
		for i := range MaxShards {
			old = append(old, StockKey(p.ID, i))
		}
		tx.Del(ctx, append(old, ShardListKey(p.ID), BuyersKey(p.ID))...)
		keys := make([]any, p.Shards)
		for i, n := range inRedis {
			tx.Set(ctx, StockKey(p.ID, i), n, 0)
			keys[i] = StockKey(p.ID, i)
		}
		tx.RPush(ctx, ShardListKey(p.ID), keys...)
		return nil
	})
	if err != nil {
		return fmt.Errorf("laying out stock of product %d in Redis: %w", p.ID, err)
	}
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Where("product_id = ?", p.ID).Delete(&Shard{}).Error; err != nil {
			return err
		}
		rows := make([]Shard, p.Shards)
		for i, n := range inSQL {
			rows[i] = Shard{ProductID: p.ID, Shard: i, Stock: n}
		}
		return tx.Create(&rows).Error
	})
	if err != nil {
		return fmt.Errorf("laying out stock of product %d in SQL: %w", p.ID, err)
	}
	s.ClearSoldOut(p.ID)
	return nil
}

// Levels returns the stock of each shard, in shard order, from the store
// that holds the product's stock. In Redis the shard keys are read from the
// product's shard list.
func (s *Store) Levels(ctx context.Context, p Product) ([]int, error) {
	if p.Where == InSQL {
		var rows []Shard
		err := s.db.WithContext(ctx).Where("product_id = ?", p.ID).Order("shard").Find(&rows).Error
		if err != nil {
			return nil, fmt.Errorf("reading SQL stock of product %d: %w", p.ID, err)
		}
		out := make([]int, len(rows))
		for i, r := range rows {
			out[i] = r.Stock
		}
		return out, nil
	}
	keys, err := s.rdb.LRange(ctx, ShardListKey(p.ID), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("reading shard list of product %d: %w", p.ID, err)
	}
	if len(keys) == 0 {
		return nil, nil
	}
	vals, err := s.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("reading stock of product %d: %w", p.ID, err)
	}
	out := make([]int, len(vals))
	for i, v := range vals {
		if v == nil {
			continue
		}
		if out[i], err = strconv.Atoi(v.(string)); err != nil {
			return nil, fmt.Errorf("stock key %s holds %q: %w", keys[i], v, err)
		}
	}
	return out, nil
}

// Take takes one unit. It starts at the shard the round-robin counter picks
// and, when the product allows fallback, tries the others in turn; it
// returns ErrSoldOut only when every shard it tried was empty.
func (s *Store) Take(ctx context.Context, r Request) (Taken, error) {
	p := r.Product
	if err := p.Accepts(r.Mode); err != nil {
		return Taken{}, err
	}
	st := s.state(p.ID)
	flag := st.flag.Load()
	if flag&1 == 1 {
		return Taken{}, ErrSoldOut
	}
	first := int(st.next.Add(1) % uint64(p.Shards))
	tries := 1
	if p.Fallback {
		tries = p.Shards
	}
	var t Taken
	for i := range tries {
		t.Shard = (first + i) % p.Shards
		ok, err := s.takeFrom(ctx, r, &t)
		if err != nil || ok {
			return t, err
		}
	}
	if p.Fallback {
		st.flag.CompareAndSwap(flag, flag|1)
	}
	return t, ErrSoldOut
}

// takeFrom tries one shard; false means the shard was empty.
func (s *Store) takeFrom(ctx context.Context, r Request, t *Taken) (bool, error) {
	id := r.Product.ID
	switch r.Mode {
	case Lua:
		n, err := takeScript.Run(ctx, s.rdb, []string{StockKey(id, t.Shard), BuyersKey(id)}, r.UserID).Int()
		if err != nil {
			return false, fmt.Errorf("taking from shard %d of product %d: %w", t.Shard, id, err)
		}
		if n < 0 {
			return false, ErrAlreadyBought
		}
		return n == 1, nil
	case DB:
		res := s.db.WithContext(ctx).Model(&Shard{}).
			Where("product_id = ? AND shard = ? AND stock > 0", id, t.Shard).
			Update("stock", gorm.Expr("stock - 1"))
		if res.Error != nil {
			return false, fmt.Errorf("taking from SQL shard %d of product %d: %w", t.Shard, id, res.Error)
		}
		return res.RowsAffected == 1, nil
	case RMW:
		return s.readModifyWrite(ctx, r, t)
	}
	return false, fmt.Errorf("%w %q", ErrUnknownMode, r.Mode)
}

// readModifyWrite is GET, check, SET under the request's lock: three round
// trips plus the lock's own, and correct only if the lock really excludes.
func (s *Store) readModifyWrite(ctx context.Context, r Request, t *Taken) (taken bool, err error) {
	key := StockKey(r.Product.ID, t.Shard)
	start := time.Now()
	lease, err := r.Locker.Acquire(ctx, LockKey(r.Product.ID, t.Shard), r.Lock)
	t.LockWait += time.Since(start)
	if errors.Is(err, lock.ErrNotObtained) {
		return false, fmt.Errorf("%w: shard %d of product %d", ErrLockTimeout, t.Shard, r.Product.ID)
	}
	if err != nil {
		return false, fmt.Errorf("locking shard %d of product %d: %w", t.Shard, r.Product.ID, err)
	}
	if r.Abandon {
		lock.Abandon(lease)
	} else {
		defer func() {
			rerr := lease.Release(ctx)
			switch {
			case rerr == nil:
			case errors.Is(rerr, lock.ErrNotHeld):
				t.LeaseLost = true
			case taken:
				// The write landed: failing now would strand the unit
				// between the store and the orders. The lock expires.
				t.ReleaseErr = rerr
			case err == nil:
				err = fmt.Errorf("releasing lock of shard %d: %w", t.Shard, rerr)
			}
		}()
	}
	// A fenced lease reads through the fence too: the read records the
	// token, so a holder whose lease expired cannot write after it.
	t.Token = lease.Token()
	var raw string
	if t.Token > 0 {
		raw, err = lock.FencedGet(ctx, s.rdb, key, t.Token)
	} else {
		raw, err = s.rdb.Get(ctx, key).Result()
	}
	switch {
	case errors.Is(err, lock.ErrStaleToken):
		return false, fmt.Errorf("%w: shard %d of product %d, token %d", ErrLeaseLost, t.Shard, r.Product.ID, t.Token)
	case errors.Is(err, redis.Nil):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading %s: %w", key, err)
	}
	n, err := strconv.Atoi(raw)
	if err != nil {
		return false, fmt.Errorf("stock key %s holds %q: %w", key, raw, err)
	}
	if n <= 0 {
		return false, nil
	}
	if err := pause(ctx, r.Hold); err != nil {
		return false, err
	}
	if t.Token > 0 {
		err = lock.FencedSet(ctx, s.rdb, key, n-1, t.Token)
		if errors.Is(err, lock.ErrStaleToken) {
			return false, fmt.Errorf("%w: shard %d of product %d, token %d", ErrLeaseLost, t.Shard, r.Product.ID, t.Token)
		}
	} else {
		err = s.rdb.Set(ctx, key, n-1, 0).Err()
	}
	if err != nil {
		return false, fmt.Errorf("writing %s: %w", key, err)
	}
	return true, nil
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

// GiveBack returns a unit that was taken but could not be sold, to the shard
// it came from, so that it is in the store again and not lost.
//
// In rmw mode the unit goes back under the shard's lock, because an INCR
// that lands between another holder's GET and SET is overwritten; under a
// fenced lock it goes back through the fence, so that a holder paused with an
// older token cannot overwrite it either. Only when the lock stays held past
// GiveBackWait, longer than any live holder holds it, does the unit go back
// without it.
func (s *Store) GiveBack(ctx context.Context, r Request, t Taken) error {
	id := r.Product.ID
	var err error
	switch r.Mode {
	case DB:
		err = s.db.WithContext(ctx).Model(&Shard{}).
			Where("product_id = ? AND shard = ?", id, t.Shard).
			Update("stock", gorm.Expr("stock + 1")).Error
	case RMW:
		err = s.giveBackLocked(ctx, r, t)
	default:
		keys := []string{StockKey(id, t.Shard), BuyersKey(id)}
		err = giveBackScript.Run(ctx, s.rdb, keys, r.UserID).Err()
	}
	if err != nil {
		return fmt.Errorf("giving a unit back to shard %d of product %d: %w", t.Shard, id, err)
	}
	s.ClearSoldOut(id)
	return nil
}

func (s *Store) giveBackLocked(ctx context.Context, r Request, t Taken) error {
	key := StockKey(r.Product.ID, t.Shard)
	opt := lock.Options{TTL: r.Lock.TTL, Wait: cmp.Or(r.GiveBackWait, DefaultGiveBackWait)}
	lease, err := r.Locker.Acquire(ctx, LockKey(r.Product.ID, t.Shard), opt)
	if errors.Is(err, lock.ErrNotObtained) {
		return s.rdb.Incr(ctx, key).Err() // the holder is dead: nobody is between GET and SET
	}
	if err != nil {
		return err
	}
	defer lease.Release(ctx) // a lost lease changes nothing here: the write below is atomic
	if tok := lease.Token(); tok > 0 {
		return lock.FencedIncr(ctx, s.rdb, key, 1, tok)
	}
	return s.rdb.Incr(ctx, key).Err()
}
