package idgen

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed next.lua
var nextLua string

var nextScript = redis.NewScript(nextLua)

//go:embed restore.lua
var restoreLua string

var restoreScript = redis.NewScript(restoreLua)

// RedisClient is what Redis needs of a client: it only runs a script.
type RedisClient interface {
	redis.Scripter
}

var _ RedisClient = (*redis.Client)(nil)

// Redis issues IDs from a per-day counter in Redis. It is safe for
// concurrent use, and IDs stay unique across every process that shares the
// Redis server and the prefix.
//
// Round trips: one per ID (EVALSHA; the first call on a server that has not
// seen the script adds an EVAL).
//
// What it cannot promise: a day key that expired and came back (a clock that
// lags by more than the key TTL) restarts its sequence at 1, and so does one
// lost in a failover to a replica that had not received the last INCRs; both
// reissue IDs.
type Redis struct {
	rdb    RedisClient
	prefix string
	now    func() time.Time
	ttl    string // key TTL in milliseconds, as the script's argument
}

// NewRedis returns a generator whose day keys are "icr:{prefix}:{yyyy:MM:dd}".
// The prefix names the kind of ID ("order"); IDs are unique only among
// those of one prefix.
func NewRedis(rdb RedisClient, prefix string, opts ...Option) *Redis {
	o := newOptions(opts)
	return &Redis{
		rdb:    rdb,
		prefix: prefix,
		now:    o.now,
		ttl:    fmt.Sprint(o.keyTTL.Milliseconds()),
	}
}

// Next returns a new ID.
func (g *Redis) Next(ctx context.Context) (ID, error) {
	now := g.now()
	// Refuse an unencodable time before taking a sequence number for it.
	secs, err := ticks(now.Sub(epoch), time.Second, timeBits)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", err, now)
	}
	key := g.key(now)
	seq, err := nextScript.Run(ctx, g.rdb, []string{key}, g.ttl).Int64()
	if err != nil {
		return 0, fmt.Errorf("incrementing %s: %w", key, err)
	}
	if seq > math.MaxUint32 {
		return 0, fmt.Errorf("%w: %s reached %d", ErrSeqOverflow, key, seq)
	}
	return ID(secs<<seqBits | seq), nil
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
func (g *Redis) key(t time.Time) string {
	return "icr:" + g.prefix + ":" + t.UTC().Format("2006:01:02")
}

// Restore moves the sequence of last's day forward to last's, if it is
// behind: called with the highest ID known to be issued (the largest order
// id in the database) after Redis lost its keys, it keeps the day's next IDs
// from repeating earlier ones of the same second. It never moves a sequence
// back.
func (g *Redis) Restore(ctx context.Context, last ID) error {
	key := g.key(last.Time())
	if err := restoreScript.Run(ctx, g.rdb, []string{key}, last.Seq(), g.ttl).Err(); err != nil {
		return fmt.Errorf("restoring %s: %w", key, err)
	}
	return nil
}

// Slot is what a script that draws an ID itself needs (see the async
// mode's take, internal/stock): the day key to INCR, its time to live in
// milliseconds (set with PEXPIRE when the INCR creates it), and the seconds
// since the epoch that make the ID's upper bits. The ID is then
// Compose(Secs, the INCR's value).
type Slot struct {
	DayKey    string
	TTLMillis string
	Secs      int64
}

// Slot returns the slot of the generator's clock now.
func (g *Redis) Slot() (Slot, error) {
	now := g.now()
	secs, err := ticks(now.Sub(epoch), time.Second, timeBits)
	if err != nil {
		return Slot{}, fmt.Errorf("%w: %v", err, now)
	}
	return Slot{DayKey: g.key(now), TTLMillis: g.ttl, Secs: secs}, nil
}

// Compose packs the seconds since the epoch and the day's sequence number.
func Compose(secs int64, seq uint32) ID { return ID(secs<<seqBits | int64(seq)) }

// Draw draws an ID in slot, as a script holding the slot's day key would:
// for a take whose own script cannot (on a Redis Cluster the day key is in
// a slot of its own).
func Draw(ctx context.Context, rdb RedisClient, s Slot) (ID, error) {
	seq, err := nextScript.Run(ctx, rdb, []string{s.DayKey}, s.TTLMillis).Int64()
	if err != nil {
		return 0, fmt.Errorf("incrementing %s: %w", s.DayKey, err)
	}
	if seq > math.MaxUint32 {
		return 0, fmt.Errorf("%w: %s reached %d", ErrSeqOverflow, s.DayKey, seq)
	}
	return Compose(s.Secs, uint32(seq)), nil
}
