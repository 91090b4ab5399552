package idgen_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"seckill/internal/idgen"
)

// TestRedisUnique has 8 goroutines, released at once, take 100,000 IDs
// (10,000 from miniredis) through two generators on two clients sharing
// one Blocks, as two service processes would, in blocks of 500: each block
// used up is a reservation raced for by both.
func TestRedisUnique(t *testing.T) {
	const workers = 8
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			a, b, prefix := be.open(t)
			deleteDayKeys(t, a, prefix)
			blocks, size := new(idgen.MemoryBlocks), idgen.WithBlockSize(500)
			gens := []*idgen.Redis{idgen.NewRedis(a, prefix, blocks, size), idgen.NewRedis(b, prefix, blocks, size)}
			ctx := t.Context()
			got := releaseAtOnce(t, workers, be.ids/workers, func(w int) (idgen.ID, error) {
				return gens[w%len(gens)].Next(ctx)
			})
			checkUniqueAndIncreasing(t, got)
		})
	}
}

func TestRedisDayRollover(t *testing.T) {
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			rdb, _, prefix := be.open(t)
			ctx := t.Context()
			beforeMidnight := mustParse(t, "2026-11-22T23:59:59.999Z")
			afterMidnight := mustParse(t, "2026-11-23T00:00:00Z")
			deleteDayKeys(t, rdb, prefix, beforeMidnight, afterMidnight)
			clk := newClock(beforeMidnight)
			g := idgen.NewRedis(rdb, prefix, new(idgen.MemoryBlocks), idgen.WithClock(clk.Now))

			steps := []struct {
				now     time.Time
				wantKey string
				wantSeq uint32
			}{
				{beforeMidnight, "ids:" + prefix + ":2026:11:22", 1},
				{beforeMidnight, "ids:" + prefix + ":2026:11:22", 2},
				{afterMidnight, "ids:" + prefix + ":2026:11:23", 1},
				{afterMidnight, "ids:" + prefix + ":2026:11:23", 2},
			}
			var last idgen.ID
			for i, s := range steps {
				clk.Set(s.now)
				id, err := g.Next(ctx)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if id.Seq() != s.wantSeq {
					t.Errorf("step %d: seq %d, want %d", i, id.Seq(), s.wantSeq)
				}
				if !id.Time().Equal(s.now.Truncate(time.Second)) {
					t.Errorf("step %d: time %v, want %v", i, id.Time(), s.now.Truncate(time.Second))
				}
				if id <= last {
					t.Errorf("step %d: id %v not above the previous %v", i, id, last)
				}
				last = id
				if n := drawn(t, rdb, s.wantKey); n != uint64(s.wantSeq) {
					t.Errorf("step %d: %s's seq = %d, want %d", i, s.wantKey, n, s.wantSeq)
				}
				// The key must not live forever.
				if ttl, err := rdb.PTTL(ctx, s.wantKey).Result(); err != nil || ttl <= 0 || ttl > idgen.DefaultKeyTTL {
					t.Errorf("step %d: %s has TTL %v (%v), want in (0, %v]", i, s.wantKey, ttl, err, idgen.DefaultKeyTTL)
				}
			}
		})
	}
}

func TestRedisKeyTTL(t *testing.T) {
	tests := []struct {
		name string
		opts []idgen.Option
		want time.Duration
	}{
		{"default", nil, idgen.DefaultKeyTTL},
		{"set", []idgen.Option{idgen.WithKeyTTL(90 * time.Minute)}, 90 * time.Minute},
		{"zero keeps the default", []idgen.Option{idgen.WithKeyTTL(0)}, idgen.DefaultKeyTTL},
	}
	now := mustParse(t, "2026-11-22T10:00:00Z")
	clock := idgen.WithClock(func() time.Time { return now })
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			rdb, _, prefix := be.open(t)
			for _, tt := range tests {
				prefix := prefix + ":" + tt.name
				deleteDayKeys(t, rdb, prefix, now)
				g := idgen.NewRedis(rdb, prefix, new(idgen.MemoryBlocks), append(tt.opts, clock)...)
				if _, err := g.Next(t.Context()); err != nil {
					t.Fatalf("%s: %v", tt.name, err)
				}
				// The real Redis may have counted down a millisecond.
				got := rdb.PTTL(t.Context(), dayKey(prefix, now)).Val()
				if got <= tt.want-time.Second || got > tt.want {
					t.Errorf("%s: TTL %v, want %v", tt.name, got, tt.want)
				}
			}
		})
	}
}

// TestRedisDecode checks that Time and Seq take apart what Next packed.
func TestRedisDecode(t *testing.T) {
	tests := []struct {
		now    string
		preset uint64 // the day key's seq before Next, with no block
		wantID idgen.ID
	}{
		{"2022-01-01T00:00:00Z", 0, 1},
		{"2022-01-01T00:00:01.5Z", 0, 1<<32 | 1},
		{"2026-11-22T10:30:15.7Z", 41, 154348215<<32 | 42},
		{"2090-01-19T03:14:07Z", math.MaxUint32 - 1, math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.now, func(t *testing.T) {
			now := mustParse(t, tt.now)
			for _, be := range backends() {
				t.Run(be.name, func(t *testing.T) {
					rdb, _, prefix := be.open(t)
					deleteDayKeys(t, rdb, prefix, now)
					if tt.preset > 0 {
						setSeq(t, rdb, dayKey(prefix, now), tt.preset)
					}
					g := idgen.NewRedis(rdb, prefix, new(idgen.MemoryBlocks), idgen.WithClock(func() time.Time { return now }))
					id, err := g.Next(t.Context())
					if err != nil {
						t.Fatal(err)
					}
					if id != tt.wantID {
						t.Errorf("id %d, want %d", id, tt.wantID)
					}
					if want := now.Truncate(time.Second); !id.Time().Equal(want) {
						t.Errorf("Time() = %v, want %v", id.Time(), want)
					}
					if want := uint32(tt.preset + 1); id.Seq() != want {
						t.Errorf("Seq() = %d, want %d", id.Seq(), want)
					}
				})
			}
		})
	}
}

func TestRedisErrors(t *testing.T) {
	tests := []struct {
		name   string
		now    string
		preset uint64
		want   error
	}{
		{"before the epoch", "2021-12-31T23:59:59Z", 0, idgen.ErrBeforeEpoch},
		{"long before the epoch", "1066-10-14T09:00:00Z", 0, idgen.ErrBeforeEpoch},
		{"past 31 bits of seconds", "2090-01-19T03:14:08Z", 0, idgen.ErrTimeOverflow},
		{"far past 31 bits", "2500-01-01T00:00:00Z", 0, idgen.ErrTimeOverflow},
		{"sequence past 32 bits", "2026-11-22T10:00:00Z", math.MaxUint32, idgen.ErrSeqOverflow},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := mustParse(t, tt.now)
			for _, be := range backends() {
				t.Run(be.name, func(t *testing.T) {
					rdb, _, prefix := be.open(t)
					deleteDayKeys(t, rdb, prefix, now)
					key := dayKey(prefix, now)
					if tt.preset > 0 {
						setSeq(t, rdb, key, tt.preset)
					}
					g := idgen.NewRedis(rdb, prefix, new(idgen.MemoryBlocks), idgen.WithClock(func() time.Time { return now }))
					id, err := g.Next(t.Context())
					if !errors.Is(err, tt.want) {
						t.Fatalf("Next() = %v, %v; want %v", id, err, tt.want)
					}
					t.Log(err)
					if tt.preset == 0 {
						// A time no ID can hold must not use up a sequence number.
						if n := rdb.Exists(t.Context(), key).Val(); n != 0 {
							t.Errorf("%s was created", key)
						}
					}
				})
			}
		})
	}
}

// TestRedisFailure checks that a failed round trip says which key it was
// for and keeps its cause.
func TestRedisFailure(t *testing.T) {
	rdb, _, prefix := backends()[0].open(t)
	now := mustParse(t, "2026-11-22T10:00:00Z")
	g := idgen.NewRedis(rdb, prefix, new(idgen.MemoryBlocks), idgen.WithClock(func() time.Time { return now }))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := g.Next(ctx)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), dayKey(prefix, now)) {
		t.Fatalf("Next() error = %v; want context.Canceled, naming the key", err)
	}
}
