package stock

import (
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

	"seckill/internal/idgen"
)

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
	Layout
	Where    Where
	Fallback bool  // try the other shards when the picked one is empty
	Sale     int64 // the sale an async take queues its order for
	// PayTimeout is the payment window an async take's order gets.
	PayTimeout time.Duration
	// Replicated: a take in Redis returns once a replica has it, or with
	// ErrNotReplicated (see awaitReplica).
	Replicated bool
	// Guarded: a read-modify-write (RMW, SQLRMW) refuses to write for a
	// holder whose lock is no longer its own, and a give-back or restore
	// without a token moves the fence on for a holder that drew one at its
	// read. Products sold to the public are guarded; lab products are not,
	// so that a holder paused past its lease shows what a lease alone
	// allows. A lease with a fencing token of its own is fenced either way.
	Guarded bool
}

// Accepts returns ErrWrongStore, explained, unless the mode named takes its
// units from w, the store that holds p's stock.
func (p Product) Accepts(mode string, w Where) error {
	if w == p.Where {
		return nil
	}
	return fmt.Errorf("%w: product %d keeps its stock in %s; mode %s takes from %s (reset the product with that mode)",
		ErrWrongStore, p.ID, p.Where, mode, w)
}

// Store takes units of stock and gives them back. It keeps, per product and
// per process, the round-robin counter that picks a take's first shard; its
// parts, built with it and each owning its own fields, keep the rest: the
// sold-out flags (Flags), the queued orders (Queue), the payment deadlines
// (Deadlines) and the shards' records (Ledgers).
type Store struct {
	rdb redis.Cmdable
	db  *gorm.DB
	// split: rdb is a cluster client, and no command may span slots (see
	// claim.go).
	split bool
	// streams is the registry of order streams (StreamsKey), which an async
	// take enrols a closed stream in.
	streams     string
	claimWindow time.Duration
	next        sync.Map // int64 → *atomic.Uint64: each product's round-robin counter

	queue     *Queue
	deadlines *Deadlines
	ledgers   *Ledgers
	flags     *Flags
}

// Queue holds the async mode's queued orders as stock keeps them: the
// shards' streams the takes append to, their registry and pending index;
// internal/outbox reads, claims and acknowledges them (see Reading).
type Queue struct {
	rdb   redis.Cmdable
	split bool
	// streams is the registry of order streams (StreamsKey); oldStreams is
	// its set before generations (OldStreamsKey), adopted once by the
	// outbox.
	streams, oldStreams string
	// flags are cleared when a dead letter's unit goes back.
	flags *Flags
}

// Deadlines holds the orders' payment deadlines: a delay queue the
// processes claim due entries from.
type Deadlines struct {
	rdb   redis.Cmdable
	split bool
	sets  string // the registry of deadline sets (DueSetsKey)
	// idle is how long an empty deadline set stays open on a cluster
	// (Idle).
	idle time.Duration
}

// Ledgers reads and writes what the shards recorded: the takes, the stock
// levels, the counts an audit compares with the orders.
type Ledgers struct {
	rdb   redis.Cmdable
	db    *gorm.DB
	split bool
	// settled: what the process knows of its products' unsettled orders
	// without a round trip (unsettled.go).
	settled sync.Map      // int64 → *settledWord
	fresh   time.Duration // SettledFor
}

// Flags are this process's sold-out flags, one per product: set, the
// product's purchases are refused without a look at Redis until a unit
// comes back.
type Flags struct {
	words sync.Map // int64 → *flagWord
	// cleared is told each product whose flag went from set to clear.
	cleared func(id int64)
}

// Flags is the process's sold-out flags.
func (s *Store) Flags() *Flags { return s.flags }

// Queue is the store's queue of orders not written yet.
func (s *Store) Queue() *Queue { return s.queue }

// Deadlines is the store's delay queue of payment deadlines.
func (s *Store) Deadlines() *Deadlines { return s.deadlines }

// Ledgers is the store's view of its shards' records.
func (s *Store) Ledgers() *Ledgers { return s.ledgers }

// flagWord is a product's sold-out flag in its lowest bit and, above it,
// the number of times it was cleared. A purchase that found every shard
// empty sets the flag only if no unit came back since it read the word, so
// a give-back racing with that purchase's scan is never hidden.
type flagWord struct{ atomic.Uint64 }

// clear clears the flag and reports whether it was set.
func (w *flagWord) clear() bool {
	for {
		v := w.Load()
		if w.CompareAndSwap(v, (v>>1+1)<<1) {
			return v&1 == 1
		}
	}
}

// NewStore returns a store on rdb and db. rdb may be a *redis.ClusterClient:
// the store then sends no command whose keys span slots (see claim.go).
func NewStore(rdb redis.Cmdable, db *gorm.DB) *Store {
	_, split := rdb.(*redis.ClusterClient)
	flags := &Flags{}
	return &Store{rdb: rdb, db: db, split: split, streams: StreamsKey, claimWindow: DefaultClaimWindow,
		queue:     &Queue{rdb: rdb, split: split, streams: StreamsKey, oldStreams: OldStreamsKey, flags: flags},
		deadlines: &Deadlines{rdb: rdb, split: split, sets: DueSetsKey, idle: DefaultDueIdle},
		ledgers:   &Ledgers{rdb: rdb, db: db, split: split, fresh: SettledFresh},
		flags:     flags,
	}
}

// ForDeployment names the deployment the store serves, that is the
// database its orders are written to: the async mode's consumers read only
// the streams of their deployment, so that processes writing to different
// databases (tests sharing one Redis) never write each other's orders.
// Processes sharing a database share it. Default: none, one registry.
func (s *Store) ForDeployment(name string) *Store {
	if name != "" {
		s.streams = StreamsKey + ":" + name
		s.queue.streams, s.queue.oldStreams = s.streams, OldStreamsKey+":"+name
		s.deadlines.sets = DueSetsKey + ":" + name
	}
	return s
}

// counter is product id's round-robin counter.
func (s *Store) counter(id int64) *atomic.Uint64 {
	if c, ok := s.next.Load(id); ok {
		return c.(*atomic.Uint64)
	}
	c, _ := s.next.LoadOrStore(id, new(atomic.Uint64))
	return c.(*atomic.Uint64)
}

// word is product id's flag word.
func (f *Flags) word(id int64) *flagWord {
	if w, ok := f.words.Load(id); ok {
		return w.(*flagWord)
	}
	w, _ := f.words.LoadOrStore(id, new(flagWord))
	return w.(*flagWord)
}

// SoldOut reports the process's sold-out flag for a product.
func (f *Flags) SoldOut(id int64) bool { return f.word(id).Load()&1 == 1 }

// Clear forgets the sold-out flag, after stock was added anywhere.
func (f *Flags) Clear(id int64) {
	if f.word(id).clear() && f.cleared != nil {
		f.cleared(id)
	}
}

// OnCleared registers fn, called with a product's id each time this
// process's sold-out flag for it goes from set to clear: whoever learned
// "sold out" from this process (the edge gate) must unlearn it then. fn runs
// on the caller's goroutine and must not block. Call it before the store
// is used.
func (f *Flags) OnCleared(fn func(id int64)) { f.cleared = fn }

// ClearAll forgets every product's flag, when stock may have come back
// unseen (a missed notice).
func (f *Flags) ClearAll() {
	f.words.Range(func(id, w any) bool {
		if w.(*flagWord).clear() && f.cleared != nil {
			f.cleared(id.(int64))
		}
		return true
	})
}

// Marker is what MarkerKey holds: the layout a process laid out last.
type Marker struct {
	Epoch   int64
	Shards  int
	Initial int
}

// LayOut writes the stock of a new layout of p, levels[i] units on shard i,
// in Redis when p keeps its stock there, and records the layout under
// MarkerKey. Nobody takes from p.Epoch until the caller publishes it, so the
// writes need not be atomic; keys the epoch may hold from an attempt that
// was never published are deleted first. For a product in SQL it writes
// nothing but the marker: see LayOutSQL.
func (s *Store) LayOut(ctx context.Context, p Product, levels []int, initial int) error {
	_, err := s.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i := range p.Shards {
			pipe.Unlink(ctx, p.StockKey(i), p.FenceKey(i), p.LedgerKey(i), p.RepairKey(i))
			if p.Where == InRedis {
				pipe.Set(ctx, p.StockKey(i), levels[i], 0)
			}
		}
		pipe.HSet(ctx, MarkerKey(p.ID), "epoch", p.Epoch, "shards", p.Shards, "initial", initial)
		return nil
	})
	if err != nil {
		return fmt.Errorf("laying out stock of product %d (epoch %d) in Redis: %w", p.ID, p.Epoch, err)
	}
	return nil
}

// LayOutSQL writes p's shard rows in tx: levels for a product in SQL, none
// for one in Redis, so that a unit is in one store only.
func LayOutSQL(tx *gorm.DB, p Product, levels []int) error {
	if err := tx.Where("product_id = ?", p.ID).Delete(&Shard{}).Error; err != nil {
		return fmt.Errorf("clearing the SQL stock of product %d: %w", p.ID, err)
	}
	if p.Where != InSQL {
		return nil
	}
	rows := make([]Shard, p.Shards)
	for i, n := range levels {
		rows[i] = Shard{ProductID: p.ID, Shard: i, Stock: n}
	}
	if err := tx.Create(&rows).Error; err != nil {
		return fmt.Errorf("laying out the SQL stock of product %d: %w", p.ID, err)
	}
	return nil
}

// ReadMarker returns the layout recorded for a product in Redis, and false
// when there is none.
func (lg *Ledgers) ReadMarker(ctx context.Context, id int64) (Marker, bool, error) {
	vals, err := lg.rdb.HMGet(ctx, MarkerKey(id), "epoch", "shards", "initial").Result()
	if err != nil {
		return Marker{}, false, fmt.Errorf("reading the layout marker of product %d: %w", id, err)
	}
	if vals[0] == nil {
		return Marker{}, false, nil
	}
	var m Marker
	var errs [3]error
	m.Epoch, errs[0] = strconv.ParseInt(fmt.Sprint(vals[0]), 10, 64)
	m.Shards, errs[1] = strconv.Atoi(fmt.Sprint(vals[1]))
	m.Initial, errs[2] = strconv.Atoi(fmt.Sprint(vals[2]))
	if err := errors.Join(errs[:]...); err != nil {
		return Marker{}, false, fmt.Errorf("the layout marker of product %d: %w", id, err)
	}
	return m, true, nil
}

// Drop deletes the Redis keys of a layout that is no longer current: its
// stock, fences and ledgers, and the buyers its ledgers name. Best effort:
// nobody reads them any more.
func (s *Store) Drop(ctx context.Context, l Layout) error {
	ledger, err := s.ledgers.Ledger(ctx, l)
	if err != nil {
		return err
	}
	_, err = s.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i := range l.Shards {
			pipe.Unlink(ctx, l.StockKey(i), l.FenceKey(i), l.LedgerKey(i), l.RepairKey(i))
		}
		pipe.Unlink(ctx, l.UnsettledKey())
		for _, e := range ledger {
			pipe.Unlink(ctx, l.BuyerKey(e.User))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("dropping layout %d of product %d: %w", l.Epoch, l.ID, err)
	}
	return nil
}

//go:embed drop_abandoned_lock.lua
var dropAbandonedLockLua string

var dropAbandonedLockScript = redis.NewScript(dropAbandonedLockLua)

// DropAbandonedLocks deletes the locks without expiry of product id's first
// shards shards, and says how many it deleted: the locks a lab run's fault
// (abandon, crash-before-expire) left on setnx or setnx-expire, which
// would hold their shards across every reset. A lock with a lease stays.
func (s *Store) DropAbandonedLocks(ctx context.Context, id int64, shards int) (int, error) {
	l := Layout{ID: id}
	cmds := make([]*redis.Cmd, shards)
	// One script per shard, pipelined: the shards' locks are in different
	// cluster slots.
	_, err := s.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i := range shards {
			cmds[i] = dropAbandonedLockScript.Eval(ctx, pipe, []string{l.LockKey(i)})
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("dropping the abandoned locks of product %d: %w", id, err)
	}
	n := 0
	for _, c := range cmds {
		if v, _ := c.Int(); v == 1 {
			n++
		}
	}
	return n, nil
}

// Levels returns the stock of each shard, in shard order, from the store
// that holds the product's stock. In Redis a missing key reads as
// ErrNotLaidOut: the stock was lost, not sold.
func (lg *Ledgers) Levels(ctx context.Context, p Product) ([]int, error) {
	if p.Where == InSQL {
		var rows []Shard
		err := lg.db.WithContext(ctx).Where("product_id = ?", p.ID).Order("shard").Find(&rows).Error
		if err != nil {
			return nil, fmt.Errorf("reading SQL stock of product %d: %w", p.ID, err)
		}
		out := make([]int, len(rows))
		for i, r := range rows {
			out[i] = r.Stock
		}
		return out, nil
	}
	// GETs in a pipeline rather than one MGET: the shards are in different
	// cluster slots.
	cmds := make([]*redis.StringCmd, p.Shards)
	_, err := lg.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i := range cmds {
			cmds[i] = pipe.Get(ctx, p.StockKey(i))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("reading stock of product %d: %w", p.ID, err)
	}
	out := make([]int, p.Shards)
	for i, c := range cmds {
		n, err := c.Int()
		if errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("%w: %s is missing", ErrNotLaidOut, p.StockKey(i))
		}
		if err != nil {
			return nil, fmt.Errorf("stock key %s: %w", p.StockKey(i), err)
		}
		out[i] = n
	}
	return out, nil
}

// Entries returns every take recorded in a layout's ledgers. A buyer holds
// one take, but on a Redis Cluster a buyer whose key's node failed mid-take
// may hold one in each of two shards (the double window, docs/INVARIANT.md):
// both are listed, so that the reconciler sees the one without an order.
func (lg *Ledgers) Entries(ctx context.Context, l Layout) ([]Entry, error) {
	cmds := make([]*redis.MapStringStringCmd, l.Shards)
	_, err := lg.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i := range cmds {
			cmds[i] = pipe.HGetAll(ctx, l.LedgerKey(i))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the ledgers of product %d: %w", l.ID, err)
	}
	var out []Entry
	for _, c := range cmds {
		for field, rec := range c.Val() {
			user, err := strconv.ParseInt(field, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("ledger of product %d: buyer %q: %w", l.ID, field, err)
			}
			e, err := parseEntry(user, rec)
			if err != nil {
				return nil, fmt.Errorf("ledger of product %d: %w", l.ID, err)
			}
			out = append(out, e)
		}
	}
	return out, nil
}

// Ledger returns the takes recorded in a layout's ledgers by buyer: one per
// buyer, the last shard's where a buyer holds two (see Entries, which a
// reconciler must read instead).
func (lg *Ledgers) Ledger(ctx context.Context, l Layout) (map[int64]Entry, error) {
	entries, err := lg.Entries(ctx, l)
	if err != nil {
		return nil, err
	}
	out := make(map[int64]Entry, len(entries))
	for _, e := range entries {
		out[e.User] = e
	}
	return out, nil
}

// Takes counts the takes recorded in a layout's ledgers.
func (lg *Ledgers) Takes(ctx context.Context, l Layout) (int, error) {
	cmds := make([]*redis.IntCmd, l.Shards)
	_, err := lg.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i := range cmds {
			cmds[i] = pipe.HLen(ctx, l.LedgerKey(i))
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("counting the takes of product %d: %w", l.ID, err)
	}
	n := 0
	for _, c := range cmds {
		n += int(c.Val())
	}
	return n, nil
}

// Record writes takes into a layout's ledgers and buyer keys, as the takes
// themselves would have: a rebuild re-derives them from the orders.
func (lg *Ledgers) Record(ctx context.Context, l Layout, entries []Entry) error {
	_, err := lg.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, e := range entries {
			pipe.HSet(ctx, l.LedgerKey(e.Shard), strconv.FormatInt(e.User, 10), e.record())
			pipe.Set(ctx, l.BuyerKey(e.User), e.record(), 0)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("recording %d takes of product %d: %w", len(entries), l.ID, err)
	}
	return nil
}

// Purge deletes the keys of a product's shards and buyers in every layout
// (by SCAN), its marker, and extra, the caller's keys of the product: for
// tests and tools that leave a shared Redis as they found it, not for a sale.
func Purge(ctx context.Context, rdb redis.UniversalClient, ids []int64, extra ...string) error {
	if len(ids) == 0 && len(extra) == 0 {
		return nil
	}
	for _, id := range ids {
		extra = append(extra, MarkerKey(id))
	}
	for _, k := range extra {
		if err := rdb.Unlink(ctx, k).Err(); err != nil {
			return fmt.Errorf("deleting %s: %w", k, err)
		}
	}
	scan := func(ctx context.Context, c redis.Cmdable) error {
		for _, id := range ids {
			for _, pat := range productPatterns(id) {
				iter := c.Scan(ctx, 0, pat, 1000).Iterator()
				var keys []string
				for iter.Next(ctx) {
					keys = append(keys, iter.Val())
				}
				if err := iter.Err(); err != nil {
					return fmt.Errorf("scanning %s: %w", pat, err)
				}
				// One UNLINK per key, pipelined: a cluster node refuses
				// one command over keys of different slots.
				_, err := c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
					for _, k := range keys {
						pipe.Unlink(ctx, k)
					}
					return nil
				})
				if err != nil {
					return fmt.Errorf("deleting the keys of product %d: %w", id, err)
				}
			}
		}
		return nil
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	}
	return scan(ctx, rdb)
}

// Queued counts the orders queued on a layout's streams, per shard: taken
// and not yet written (the async mode).
func (lg *Ledgers) Queued(ctx context.Context, l Layout) ([]int, error) {
	cmds := make([]*redis.IntCmd, l.Shards)
	_, err := lg.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i := range cmds {
			cmds[i] = pipe.XLen(ctx, l.StreamKey(i))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("counting the queued orders of product %d: %w", l.ID, err)
	}
	out := make([]int, l.Shards)
	for i, c := range cmds {
		out[i] = int(c.Val())
	}
	return out, nil
}

// Counts are a Redis product's counts per shard, read together.
type Counts struct {
	Levels []int // stock
	Queued []int // orders queued, not written yet (the async mode)
	Takes  int   // takes recorded in the ledgers, over all shards
	// QueuedIDs are the order ids of the queued entries, read by
	// CountWithQueue only.
	QueuedIDs []idgen.ID
	// Repairs are the takes the shards had forgotten and that were
	// recorded again (Restore).
	Repairs Repairs
}

// Count reads a Redis product's stock, queued orders, takes and repairs in one
// round trip. A missing stock key reads as ErrNotLaidOut.
func (lg *Ledgers) Count(ctx context.Context, p Product) (Counts, error) {
	return lg.count(ctx, p, false)
}

// CountWithQueue is Count that also reads the queued entries' order ids,
// in the same round trip: a whole stream each, for an audit that must tell
// entries whose orders are written already from the others.
func (lg *Ledgers) CountWithQueue(ctx context.Context, p Product) (Counts, error) {
	return lg.count(ctx, p, true)
}

func (lg *Ledgers) count(ctx context.Context, p Product, withQueue bool) (Counts, error) {
	type shard struct {
		stock        *redis.StringCmd
		queued, took *redis.IntCmd
		entries      *redis.XMessageSliceCmd
		repairs      *redis.SliceCmd
	}
	cmds := make([]shard, p.Shards)
	read := func(pipe redis.Pipeliner, i int) {
		cmds[i] = shard{stock: pipe.Get(ctx, p.StockKey(i)), queued: pipe.XLen(ctx, p.StreamKey(i)), took: pipe.HLen(ctx, p.LedgerKey(i)),
			repairs: pipe.HMGet(ctx, p.RepairKey(i), "restored", "short")}
		if withQueue {
			cmds[i].entries = pipe.XRange(ctx, p.StreamKey(i), "-", "+")
		}
	}
	// Each shard's reads in one transaction: a give-back (one script on one
	// shard) lands between two reads of a plain pipeline, and the audit
	// would see the stock before it and the ledger after, a unit missing
	// that was never lost. A shard's keys share a slot; the shards do not,
	// so on a cluster it is one MULTI per shard.
	var err error
	if _, cluster := lg.rdb.(*redis.ClusterClient); cluster {
		for i := range cmds {
			_, err = lg.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error { read(pipe, i); return nil })
			if err != nil && !errors.Is(err, redis.Nil) {
				break
			}
		}
	} else {
		_, err = lg.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			for i := range cmds {
				read(pipe, i)
			}
			return nil
		})
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return Counts{}, fmt.Errorf("reading the counts of product %d: %w", p.ID, err)
	}
	c := Counts{Levels: make([]int, p.Shards), Queued: make([]int, p.Shards)}
	for i, sh := range cmds {
		n, err := sh.stock.Int()
		if errors.Is(err, redis.Nil) {
			return Counts{}, fmt.Errorf("%w: %s is missing", ErrNotLaidOut, p.StockKey(i))
		}
		if err != nil {
			return Counts{}, fmt.Errorf("stock key %s: %w", p.StockKey(i), err)
		}
		c.Levels[i], c.Queued[i] = n, int(sh.queued.Val())
		c.Takes += int(sh.took.Val())
		c.Repairs.add(sh.repairs.Val())
		if sh.entries == nil {
			continue
		}
		for _, m := range sh.entries.Val() {
			// The entry's "id", as async.lua wrote it; the rest of the
			// entry is the outbox's to read (outbox.QueuedOrder).
			raw, _ := m.Values["id"].(string)
			if id, err := idgen.ParseID(raw); err == nil && id != 0 {
				c.QueuedIDs = append(c.QueuedIDs, id)
			}
		}
	}
	return c, nil
}
