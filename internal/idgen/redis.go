package idgen

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed next.lua
var nextLua string

var nextScript = redis.NewScript(nextLua)

//go:embed refill.lua
var refillLua string

var refillScript = redis.NewScript(refillLua)

//go:embed drop.lua
var dropLua string

var dropScript = redis.NewScript(dropLua)

// RedisClient is what Redis needs of a client: it only runs scripts.
type RedisClient interface {
	redis.Scripter
}

var _ RedisClient = (*redis.Client)(nil)

// Redis issues IDs from a per-day counter in Redis, within blocks of
// sequence numbers reserved in Blocks. It is safe for concurrent use, and
// IDs stay unique across every process that shares the Redis server, the
// prefix and the Blocks, and across Redis losing its keys: a day key gone
// (a restart without persistence, an expiry) has no block, and the next
// draw reserves one past every number reserved before.
//
// Round trips: one per ID (EVALSHA; the first call on a server that has not
// seen the script adds an EVAL); once a block, a reservation in Blocks and
// one more to Redis to set it.
//
// What it cannot promise alone: a Redis back from an AOF or RDB that lost
// its last draws holds a block it already used part of, and so does a
// replica promoted without its master's last draws. Connected, the
// client's connection hook, drops the blocks of a server whose run id is
// new before the connection serves anything (a restart); on a Redis
// Cluster (rdb a *redis.ClusterClient) a day key's draws also run on the
// master of its slot itself, and a master the generator has not drawn that
// key on before has the key's block dropped first (a failover).
type Redis struct {
	rdb     RedisClient
	cluster *redis.ClusterClient // rdb, on a Redis Cluster
	blocks  Blocks
	prefix  string
	now     func() time.Time
	ttl     string // key TTL in milliseconds, as the script's argument
	size    uint32 // numbers per block

	// refilling lets one reservation at a time run: draws refused together
	// need one block, not one each. refills counts those done, so that a
	// caller refused before the last one ended draws again without another.
	refilling sync.Mutex
	refills   atomic.Uint64
	// lastSet is the last block set (under refilling): its day key and
	// its end. A reservation ahead of need is made unless a block past its
	// floor is set already; the count of refills cannot tell, since a draw
	// may see a block before its refill is counted.
	lastSet struct {
		key string
		to  uint64
	}

	// The reservation ahead of need (see drawn): its state, and the
	// goroutine that makes it, which Close cancels and waits for.
	aheadMu sync.Mutex
	next    aheadState
	closed  bool
	bg      sync.WaitGroup
	bgCtx   context.Context
	stop    context.CancelFunc

	// runIDs are the run ids of the servers Connected has met (and dropped
	// the blocks of); runMu is held across a drop, so that no connection
	// to a restarted server serves before its blocks are gone.
	runMu  sync.Mutex
	runIDs map[string]bool

	// The server each day key was last drawn on (day key → its address on
	// a cluster, "" on one Redis), whose block was dropped before the
	// first draw there (see on); pinMu serializes those drops.
	pinned sync.Map
	pinMu  sync.Mutex
}

// aheadState says for which block the next one is reserved ahead: none
// is tried again for key's block ending at ceil before until.
type aheadState struct {
	key   string
	ceil  uint64
	until time.Time
}

// NewRedis returns a generator whose day keys are "ids:{prefix}:{yyyy:MM:dd}"
// and whose blocks blocks reserves. The prefix names the kind of ID
// ("order"); IDs are unique only among those of one prefix, one Redis and
// one Blocks. Close stops its reservations ahead of need.
func NewRedis(rdb RedisClient, prefix string, blocks Blocks, opts ...Option) *Redis {
	o := newOptions(opts)
	ctx, stop := context.WithCancel(context.Background())
	cc, _ := rdb.(*redis.ClusterClient)
	return &Redis{
		rdb:     rdb,
		cluster: cc,
		runIDs:  make(map[string]bool),
		blocks:  blocks,
		prefix:  prefix,
		now:     o.now,
		ttl:     fmt.Sprint(o.keyTTL.Milliseconds()),
		size:    o.blockSize,
		bgCtx:   ctx,
		stop:    stop,
	}
}

// Close cancels a reservation running ahead of need and waits for it.
func (g *Redis) Close() {
	g.aheadMu.Lock()
	g.closed = true
	g.aheadMu.Unlock()
	g.stop()
	g.bg.Wait()
}

// Next returns a new ID.
func (g *Redis) Next(ctx context.Context) (ID, error) {
	// Refuse an unencodable time before taking a sequence number for it.
	s, err := g.Slot(ctx)
	if err != nil {
		return 0, err
	}
	return g.Draw(ctx, s)
}

// NextString returns Next in its string form.
func (g *Redis) NextString(ctx context.Context) (string, error) {
	id, err := g.Next(ctx)
	if err != nil {
		return "", err
	}
	return id.String(), nil
}

// key names the day t falls in. The day is UTC's, so that processes in
// different time zones map one second to the same key.
func (g *Redis) key(t time.Time) string { return dayKey(g.prefix, t) }

// dayKey names prefix's day that t falls in, in Redis and in Blocks.
func dayKey(prefix string, t time.Time) string {
	return "ids:" + prefix + ":" + t.UTC().Format("2006:01:02")
}

// Slot is where a draw runs: the day key whose "seq" next.lua increments
// within its "ceil", and the seconds since the epoch that make the ID's
// upper bits. The ID is then Compose(Secs, the new seq). Only this package
// draws: a caller that needs an ID in a script of its own (the async take)
// draws it with Next first and passes it in.
type Slot struct {
	DayKey  string
	Secs    int64
	refills uint64 // the generator's refills when the slot was made
}

// Slot returns the slot of the generator's clock now. A draw on its day key
// may run on rdb at once: the day key's block is dropped first if the
// generator has not drawn it there before (see on).
func (g *Redis) Slot(ctx context.Context) (Slot, error) {
	now := g.now()
	secs, err := ticks(now.Sub(epoch), time.Second, timeBits)
	if err != nil {
		return Slot{}, fmt.Errorf("%w: %v", err, now)
	}
	key := g.key(now)
	if _, err := g.on(ctx, key); err != nil {
		return Slot{}, err
	}
	return Slot{DayKey: key, Secs: secs, refills: g.refills.Load()}, nil
}

// Compose packs the seconds since the epoch and the day's sequence number.
func Compose(secs int64, seq uint32) ID { return ID(secs<<seqBits | int64(seq)) }

// maxRefills bounds the blocks one draw reserves: a block is set before the
// draw that asked for it runs again, so a second refusal means blocks being
// dropped as fast as they are set.
const maxRefills = 3

// Draw draws an ID in slot s, reserving a block when the day has none left.
func (g *Redis) Draw(ctx context.Context, s Slot) (ID, error) {
	for try := 0; ; try++ {
		res, err := g.run(ctx, nextScript, s.DayKey).Int64Slice()
		if err != nil {
			return 0, fmt.Errorf("drawing from %s: %w", s.DayKey, err)
		}
		if res[0] == 1 {
			g.drawn(s, uint64(res[1]), uint64(res[2]))
			return Compose(s.Secs, uint32(res[1])), nil
		}
		if try == maxRefills {
			return 0, fmt.Errorf("drawing from %s: no block of sequence numbers after %d reservations", s.DayKey, try)
		}
		if s, err = g.refillSlot(ctx, s, uint64(res[1])); err != nil {
			return 0, err
		}
	}
}

// refillSlot reserves a block for s's day past floor (the seq Redis
// reported) and sets it in Redis, unless another caller did so since s was
// made. It returns s as of now, for the next draw.
func (g *Redis) refillSlot(ctx context.Context, s Slot, floor uint64) (Slot, error) {
	n, err := g.refill(ctx, s.DayKey, floor, s.refills, false)
	s.refills = n
	return s, err
}

// refill reserves a block for key past floor and sets it, unless a block
// was set since refills read seen; it returns refills as it leaves them.
// ahead is a reservation ahead of need, made unless a block past floor is
// set (seen is not looked at).
func (g *Redis) refill(ctx context.Context, key string, floor, seen uint64, ahead bool) (uint64, error) {
	g.refilling.Lock()
	defer g.refilling.Unlock()
	if n := g.refills.Load(); !ahead && n != seen || ahead && g.lastSet.key == key && g.lastSet.to > floor {
		return n, nil
	}
	from, to, err := g.blocks.Reserve(ctx, key, floor, g.size)
	if err != nil {
		return seen, err
	}
	if from >= math.MaxUint32 {
		return seen, fmt.Errorf("%w: %s reached %d", ErrSeqOverflow, key, from)
	}
	if err := g.run(ctx, refillScript, key, from, min(to, math.MaxUint32), g.ttl).Err(); err != nil {
		return seen, fmt.Errorf("setting the block (%d, %d] of %s: %w", from, to, key, err)
	}
	g.lastSet.key, g.lastSet.to = key, to
	return g.refills.Add(1), nil
}

// aheadTimeout bounds a reservation ahead of need; aheadRetry is how long
// one that failed (the database unreachable) waits before the next try,
// so that a draw past half a block does not try once per ID.
const (
	aheadTimeout = 5 * time.Second
	aheadRetry   = time.Second
)

// drawn tells the generator that a draw in s's day issued seq of the block
// ending at ceil. Once half a block is used, the next block is reserved in
// the background and joined to it (refill.lua): the draws never wait for
// the database at a block's end, and go on through a database outage
// shorter than half a block's worth of IDs.
func (g *Redis) drawn(s Slot, seq, ceil uint64) {
	if ceil-seq > uint64(g.size/2) || ceil >= math.MaxUint32 {
		return
	}
	now := time.Now()
	g.aheadMu.Lock()
	defer g.aheadMu.Unlock()
	if g.closed || g.next.key == s.DayKey && g.next.ceil == ceil && now.Before(g.next.until) {
		return
	}
	g.next = aheadState{key: s.DayKey, ceil: ceil, until: now.Add(aheadTimeout + aheadRetry)}
	g.bg.Add(1)
	go func() {
		defer g.bg.Done()
		ctx, cancel := context.WithTimeout(g.bgCtx, aheadTimeout)
		defer cancel()
		_, err := g.refill(ctx, s.DayKey, ceil, 0, true)
		g.aheadMu.Lock()
		defer g.aheadMu.Unlock()
		if g.next.key == s.DayKey && g.next.ceil == ceil {
			if err != nil {
				g.next.until = time.Now().Add(aheadRetry)
			} else {
				g.next.until = time.Now().Add(24 * time.Hour) // done: its block has a new end
			}
		}
	}()
}

// DropBlocks drops, on rdb, the blocks of the day keys around now (the day
// before, today, the day after): the next draw of each reserves a new block
// past every number reserved. Call it before anything else reaches a Redis
// that restarted from persistence (see Redis); rdb may be the connection
// being set up, since only the scripts are needed.
func (g *Redis) DropBlocks(ctx context.Context, rdb RedisClient) error {
	keys := g.aroundNow()
	if err := dropScript.Run(ctx, rdb, keys).Err(); err != nil {
		return fmt.Errorf("dropping the blocks of %v: %w", keys, err)
	}
	return nil
}

// aroundNow names the day keys around now: the day before, today, the day
// after.
func (g *Redis) aroundNow() []string {
	now := g.now()
	return []string{g.key(now.AddDate(0, 0, -1)), g.key(now), g.key(now.AddDate(0, 0, 1))}
}

// Connected is the OnConnect hook of the client the generator draws on
// (app wires it, through the order service): a new connection to a server
// whose run id the generator has not met, one that restarted (or this
// process's first), drops the blocks that server holds before the
// connection serves anything (see Redis). One that came back empty has
// none, and loses nothing by it. On a Redis Cluster each node has its run
// id and serves some of the day keys: it drops those, and its refusal of
// the others (MOVED: another node's slot, or it is a replica) is passed.
//
// A server that does not tell its run id (the embedded one answers INFO
// with an error) is passed: it runs in this process, and cannot restart
// without it. A failure to ask, or to drop, is the connection's: it is not
// used, and the next connection asks again.
func (g *Redis) Connected(ctx context.Context, cn *redis.Conn) error {
	info, err := cn.Info(ctx, "server").Result()
	var reply redis.Error
	switch {
	case errors.As(err, &reply):
		return nil
	case err != nil:
		return fmt.Errorf("reading the run id of a new Redis connection: %w", err)
	}
	var runID string
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
			runID = v
		}
	}
	if runID == "" {
		return nil
	}
	g.runMu.Lock()
	defer g.runMu.Unlock()
	if g.runIDs[runID] {
		return nil
	}
	if g.cluster == nil {
		err = g.DropBlocks(ctx, cn)
	} else {
		err = g.dropServed(ctx, cn)
	}
	if err != nil {
		return fmt.Errorf("a Redis that restarted (run id %s): %w", runID, err)
	}
	g.runIDs[runID] = true
	return nil
}

// dropServed drops, on a cluster node's connection, the blocks of the day
// keys around now that the node serves: one key a script, since each is in
// a slot of its own.
func (g *Redis) dropServed(ctx context.Context, cn *redis.Conn) error {
	for _, key := range g.aroundNow() {
		err := dropScript.Run(ctx, cn, []string{key}).Err()
		if _, moved := redis.IsMovedError(err); moved {
			continue
		}
		if _, ask := redis.IsAskError(err); ask {
			continue
		}
		if err != nil {
			return fmt.Errorf("dropping the block of %s: %w", key, err)
		}
	}
	return nil
}

// run runs script on the day key key, on the server on names. On a
// cluster, that master's redirection is answered as the cluster client
// would, but for the block: ASK (the slot is moving, and the key, moved
// whole with its block by MIGRATE, is on the new master already) is
// followed; MOVED (the slot has a new master) fails the call and reloads
// the slot map, so that the next draw pins the key on the new master,
// dropping its block there first.
func (g *Redis) run(ctx context.Context, script *redis.Script, key string, args ...any) *redis.Cmd {
	rdb, err := g.on(ctx, key)
	if err != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	cmd := script.Run(ctx, rdb, []string{key}, args...)
	if g.cluster == nil {
		return cmd
	}
	if _, ask := redis.IsAskError(cmd.Err()); ask {
		return script.Run(ctx, g.cluster, []string{key}, args...)
	}
	if _, moved := redis.IsMovedError(cmd.Err()); moved {
		g.cluster.ReloadState(ctx)
	}
	return cmd
}

// on returns the client a script on the day key key runs on, after
// dropping key's block there unless the generator has drawn key there
// before: rdb, or on a Redis Cluster the master of key's slot itself. So a
// process's first draw of a day never uses a block left by a server that
// restarted before the process met it, and on a cluster a replica promoted
// without its master's last draws (which holds a block it, as that master,
// already used part of) has that block dropped before the first draw on
// it. The script runs on the master the slot map names (see run for a
// redirection).
func (g *Redis) on(ctx context.Context, key string) (RedisClient, error) {
	rdb, addr := g.rdb, ""
	if g.cluster != nil {
		node, err := g.cluster.MasterForKey(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("finding the master of %s: %w", key, err)
		}
		rdb, addr = node, node.Options().Addr
	}
	if at, ok := g.pinned.Load(key); ok && at == addr {
		return rdb, nil
	}
	g.pinMu.Lock()
	defer g.pinMu.Unlock()
	if at, ok := g.pinned.Load(key); ok && at == addr {
		return rdb, nil
	}
	if err := dropScript.Run(ctx, rdb, []string{key}).Err(); err != nil {
		return nil, fmt.Errorf("dropping the block of %s before the first draw on %s: %w", key, cmp.Or(addr, "this Redis"), err)
	}
	g.pinned.Store(key, addr)
	return rdb, nil
}
