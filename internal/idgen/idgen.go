// Package idgen issues order IDs, and holds three other generators to
// compare them with.
//
// # Segments: the order IDs
//
// Segments issues IDs of the shape below without a round trip: each
// process reserves a block of the day's sequence numbers in SQL (Blocks)
// and draws it in memory, reserving the next block in the background at
// half use (Meituan Leaf's double-buffered segments). No purchase touches
// Redis for its ID, so no key is hot on a Redis Cluster, and no Redis
// restart or failover can repeat one. What it gives up against one counter:
// within a second, IDs of different processes sort by their blocks, not by
// when they were drawn (see Segments).
//
// # Redis IDs
//
// Redis, after the seed project's RedisIdWorker, draws the same IDs from a
// day key in Redis: one round trip each, and the key one master serves for
// every purchase. The IDs pack a 63-bit positive int64:
//
//	bit 63     62 ................ 32   31 .............. 0
//	  0       seconds since EpochUnix   sequence of the day
//	 sign           (31 bits)                (32 bits)
//
// The sequence is HINCRBY on the day key "ids:{prefix}:{yyyy:MM:dd}" (the
// UTC day), so any second falls in exactly one key and no two IDs of the
// same second share a sequence number, whichever process asked. 31 bits of
// seconds last until 2090-01-19; 32 bits of sequence allow 4,294,967,295 IDs
// a day. IDs sort by second, and within a second by the order Redis drew
// them. ID.Time and ID.Seq take the two parts apart again.
//
// # Blocks: why a lost Redis issues no ID twice
//
// The seed's RedisIdWorker INCRs a string; a Redis that restarts empty
// starts the day again at 1 and issues, within the same second, IDs it has
// issued already. Here Redis draws only within a block of numbers reserved
// in a durable store first (Blocks, in SQL beside the orders): the day key
// is a hash of "seq" and "ceil", the end of its block. A key lost with Redis
// has no block; the next draw reserves one past the store's ceiling, which
// is past every number any Redis was allowed to issue, the ones lost with
// it included. A Redis restored from an older snapshot, or a replica
// promoted before it had its master's last draws, still holds a block it
// had used part of: it is dropped before the first draw there, by
// Connected (the client's connection hook: a server whose run id is new)
// and by a process's first draw of a day key on a server (on a cluster,
// on each master newly serving the key). The next block is reserved in
// the background once half of one is used, and joined to it, so the draws
// wait for the store neither at a block's end nor through a short outage.
//
// # Why IDs travel as strings
//
// An ID issued today is above 2^53 (the timestamp alone is shifted 32 bits),
// and JavaScript parses every JSON number into a float64, which rounds such
// an integer to a different one. So ID marshals to a JSON string, as the API
// contract says (docs/API.md), and accepts either form when it unmarshals. In
// Go and in SQL (a BIGINT column through GORM) it stays a plain int64.
//
// # Comparison
//
// Snowflake (41-bit milliseconds, 10-bit worker, 12-bit sequence) needs no
// round trip but needs a unique worker ID per process; UUIDv7 needs neither
// but is 128 bits and travels as 36 characters. All three satisfy Generator,
// which the benchmarks use to compare them.
package idgen

import (
	"context"
	"errors"
	"time"
)

// Outcomes a caller branches on.
var (
	// ErrBeforeEpoch: the clock reads a time before EpochUnix, which no ID
	// can encode.
	ErrBeforeEpoch = errors.New("idgen: clock before epoch")
	// ErrTimeOverflow: the clock reads a time past the last one the
	// timestamp bits can hold.
	ErrTimeOverflow = errors.New("idgen: clock past the id's range")
	// ErrSeqOverflow: the day key's sequence no longer fits in 32 bits.
	ErrSeqOverflow = errors.New("idgen: sequence overflow")
	// ErrClockBackwards: the Snowflake's clock reads a time before the last
	// ID it issued.
	ErrClockBackwards = errors.New("idgen: clock moved backwards")
	// ErrWorkerID: the Snowflake worker ID is outside 0..MaxWorkerID.
	ErrWorkerID = errors.New("idgen: worker id out of range")
	// ErrInvalidID: the text is not a non-negative decimal int64.
	ErrInvalidID = errors.New("idgen: invalid id")
)

// EpochUnix is the instant all timestamps count from, 2022-01-01T00:00:00Z,
// in Unix seconds. Counting from it rather than from 1970 leaves the
// timestamp bits decades of range; changing it would reissue old IDs.
const EpochUnix int64 = 1640995200

var epoch = time.Unix(EpochUnix, 0)

// Generator is what a comparison of the generators needs: the next ID, in
// the string form IDs travel in. Implementations are safe for concurrent use.
type Generator interface {
	NextString(ctx context.Context) (string, error)
}

var (
	_ Generator = (*Redis)(nil)
	_ Generator = (*Segments)(nil)
	_ Generator = (*Snowflake)(nil)
	_ Generator = UUIDv7{}
)

// Option configures Redis and Snowflake.
type Option func(*options)

type options struct {
	now       func() time.Time
	keyTTL    time.Duration
	blockSize uint32
	minStep   uint32
	maxStep   uint32
}

func newOptions(opts []Option) options {
	o := options{now: time.Now, keyTTL: DefaultKeyTTL, blockSize: DefaultBlockSize}
	for _, opt := range opts {
		opt(&o)
	}
	if o.keyTTL < time.Millisecond {
		// PEXPIRE with zero or less would delete the key it just created.
		o.keyTTL = DefaultKeyTTL
	}
	if o.blockSize == 0 {
		o.blockSize = DefaultBlockSize
	}
	return o
}

// WithClock sets the clock the generator reads, for tests. Default:
// time.Now.
func WithClock(now func() time.Time) Option {
	return func(o *options) { o.now = now }
}

// DefaultBlockSize is how many sequence numbers Redis reserves at a time
// unless WithBlockSize says otherwise. A reservation is one short SQL
// transaction, made when half the block before is used: at 10,000 IDs a
// second that leaves 50 seconds in which a database outage goes unnoticed
// by the draws. A day holds 4,096 blocks; a Redis restart, or two
// processes reserving on demand at once, skips the rest of one.
const DefaultBlockSize = 1 << 20

// WithBlockSize sets how many sequence numbers Redis reserves at a time; 0
// keeps the default. Snowflake ignores it. Default: DefaultBlockSize.
func WithBlockSize(n uint32) Option {
	return func(o *options) { o.blockSize = n }
}

// DefaultKeyTTL is how long a Redis day key lives after its first block
// unless WithKeyTTL says otherwise: it outlives its day by at least one more,
// so a process whose clock lags by less than that still finds the key.
const DefaultKeyTTL = 48 * time.Hour

// WithKeyTTL sets how long a Redis day key lives after its first block; less
// than a millisecond keeps the default. Snowflake ignores it. Default:
// DefaultKeyTTL.
func WithKeyTTL(d time.Duration) Option {
	return func(o *options) { o.keyTTL = d }
}

// ticks counts the whole units in sinceEpoch, refusing a count that does
// not fit in bits.
func ticks(sinceEpoch, unit time.Duration, bits uint) (int64, error) {
	if sinceEpoch < 0 {
		return 0, ErrBeforeEpoch
	}
	n := int64(sinceEpoch / unit)
	if n >= 1<<bits {
		return 0, ErrTimeOverflow
	}
	return n, nil
}
