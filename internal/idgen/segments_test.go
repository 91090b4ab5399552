package idgen_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/glebarez/sqlite"
	"gorm.io/driver/mysql"

	"seckill/internal/idgen"
	"seckill/internal/testkit"
)

// segmentStores are the stores Segments reserves in: memory, SQLite (the
// service's database without MYSQL_DSN) and MySQL where MYSQL_DSN names one.
// open makes a store and returns how a process reaches it: on MySQL each
// call is a connection pool of its own, as each process has.
func segmentStores() []struct {
	name string
	open func(t *testing.T) func() idgen.Blocks
} {
	return []struct {
		name string
		open func(t *testing.T) func() idgen.Blocks
	}{
		{"memory", func(*testing.T) func() idgen.Blocks {
			b := new(idgen.MemoryBlocks)
			return func() idgen.Blocks { return b }
		}},
		{"sqlite", func(t *testing.T) func() idgen.Blocks {
			b := sqlBlocks(t, sqlite.Open(testkit.MemorySQLite(t))) // one handle: the processes share it
			return func() idgen.Blocks { return b }
		}},
		{"mysql", func(t *testing.T) func() idgen.Blocks {
			if os.Getenv("MYSQL_DSN") == "" {
				testkit.Skip(t, testkit.NoMySQL, "MYSQL_DSN is unset; SQLite is the subtest above (go-mysql-server loses concurrent UPDATEs, see TestBlocksDisjoint)")
			}
			dsn := testkit.NewMySQL(t)
			return func() idgen.Blocks { return sqlBlocks(t, mysql.Open(dsn)) }
		}},
	}
}

// Four generators on one store, as four processes would hold (on MySQL,
// each with connections of its own), drawn by 16
// goroutines released at once, in blocks small enough that they reserve
// dozens each: no ID twice, and each goroutine's IDs increasing.
func TestSegmentsUnique(t *testing.T) {
	const instances, workers, each = 4, 16, 800
	for _, st := range segmentStores() {
		t.Run(st.name, func(t *testing.T) {
			process := st.open(t)
			var stores []*recordingBlocks
			gens := make([]*idgen.Segments, instances)
			for i := range gens {
				stores = append(stores, &recordingBlocks{Blocks: process()})
				gens[i] = idgen.NewSegments(stores[i], "test", idgen.WithSteps(64, 128))
				t.Cleanup(gens[i].Close)
			}
			got := releaseAtOnce(t, workers, each, func(w int) (idgen.ID, error) {
				return gens[w%instances].Next(t.Context())
			})
			checkUniqueAndIncreasing(t, got)
			for i, b := range stores {
				if n := len(b.sizes()); n < 2 {
					t.Errorf("generator %d made %d reservations; want several", i, n)
				}
			}
		})
	}
}

// A restart (a new generator on the same store) draws past every block the
// one before reserved, the one it reserved ahead included: in the same
// second, no ID again, and all of them after the first generator's.
func TestSegmentsRestart(t *testing.T) {
	for _, st := range segmentStores() {
		t.Run(st.name, func(t *testing.T) {
			process := st.open(t)
			now := mustParse(t, "2026-11-25T10:00:00Z")
			clock := func() time.Time { return now }
			first := idgen.NewSegments(process(), "test", idgen.WithSteps(100, 100), idgen.WithClock(clock))
			before := drawSegments(t, first, 70) // past half: the next block reserved ahead
			first.Close()
			again := idgen.NewSegments(process(), "test", idgen.WithSteps(100, 100), idgen.WithClock(clock))
			t.Cleanup(again.Close)
			after := drawSegments(t, again, 70)
			if last, first := before[len(before)-1], after[0]; first <= last {
				t.Errorf("after the restart %d (seq %d), not past %d (seq %d)", first, first.Seq(), last, last.Seq())
			}
			checkUniqueAndIncreasing(t, [][]idgen.ID{append(before, after...)})
		})
	}
}

// Once half a block is used the next is reserved in the background: with
// the store down from then on, the draws go through the rest of the block
// and the whole next one without waiting for it, and without a number
// skipped; only the draw past both waits (and here gives up, the store
// being down).
func TestSegmentsDoubleBuffer(t *testing.T) {
	const size = 100
	now := mustParse(t, "2026-11-25T10:00:00Z")
	blocks := &recordingBlocks{Blocks: new(idgen.MemoryBlocks)}
	g := idgen.NewSegments(blocks, "test", idgen.WithSteps(size, size), idgen.WithClock(func() time.Time { return now }))
	t.Cleanup(g.Close)
	ids := drawSegments(t, g, size/2)
	waitFor(t, "the next block reserved ahead", func() bool { return len(blocks.sizes()) == 2 })
	blocks.down()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	for range size/2 + size {
		id, err := g.Next(ctx)
		if err != nil {
			t.Fatalf("draw %d, the store down: %v; want it drawn from the blocks in hand", len(ids)+1, err)
		}
		ids = append(ids, id)
	}
	for i, id := range ids {
		if id.Seq() != uint32(i+1) {
			t.Fatalf("draw %d has seq %d", i+1, id.Seq())
		}
	}
	if _, err := g.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the draw past both blocks, the store down: %v; want it waiting for the store", err)
	}
	// The first, one ahead at half of it, one ahead at half of the next.
	waitFor(t, "the third reservation", func() bool { return len(blocks.sizes()) == 3 })
}

// Within a minute of midnight the next day's block is reserved ahead, so
// the first draws of the day wait for no store; the day's IDs carry its
// seconds and start its sequence again, and sort after the last day's.
func TestSegmentsAcrossMidnight(t *testing.T) {
	clock := newClock(mustParse(t, "2026-11-25T23:59:30Z"))
	blocks := &recordingBlocks{Blocks: new(idgen.MemoryBlocks)}
	g := idgen.NewSegments(blocks, "test", idgen.WithSteps(100, 100), idgen.WithClock(clock.Now))
	t.Cleanup(g.Close)
	before := drawSegments(t, g, 10)
	waitFor(t, "the next day's block reserved ahead", func() bool {
		return slices.Contains(blocks.keys(), "ids:test:2026:11:26")
	})
	blocks.down()
	clock.Set(mustParse(t, "2026-11-26T00:00:00.5Z"))
	after := drawSegments(t, g, 10)
	for i, id := range after {
		if id.Time() != mustParse(t, "2026-11-26T00:00:00Z") || id.Seq() != uint32(i+1) {
			t.Errorf("draw %d after midnight: %d at %v, seq %d", i+1, id, id.Time(), id.Seq())
		}
	}
	checkUniqueAndIncreasing(t, [][]idgen.ID{append(before, after...)})
}

// A block's size follows use: doubled while a block lasts under 15 minutes,
// up to the most; halved when one lasted over 30, down to the least.
func TestSegmentsSizedByUse(t *testing.T) {
	clock := newClock(mustParse(t, "2026-11-25T10:00:00Z"))
	blocks := &recordingBlocks{Blocks: new(idgen.MemoryBlocks)}
	g := idgen.NewSegments(blocks, "test", idgen.WithSteps(100, 800), idgen.WithClock(clock.Now))
	t.Cleanup(g.Close)
	// Within a second: 100, 200, 400, 800, and 800 reserved at half the last.
	drawSegments(t, g, 100+200+400+800)
	// Each next block reserved an hour after the one before.
	clock.Set(clock.Now().Add(time.Hour))
	drawSegments(t, g, 400) // half of the 800: the next begins, 400
	clock.Set(clock.Now().Add(time.Hour))
	drawSegments(t, g, 400+200) // the rest of the 800, half of the 400: 200
	want := []uint32{100, 200, 400, 800, 800, 400, 200}
	waitFor(t, "the reservations ahead", func() bool { return len(blocks.sizes()) == len(want) })
	if got := blocks.sizes(); !slices.Equal(got, want) {
		t.Errorf("block sizes %v; want %v", got, want)
	}
}

// Processes of both kinds on one store (a deployment rolling from Redis's
// day key to segments) share the day's rows of it, so the IDs they issue
// in one second never meet: drawn alternately, in blocks of 100 each.
func TestSegmentsBesideRedis(t *testing.T) {
	now := mustParse(t, "2026-11-25T10:00:00Z")
	clock := func() time.Time { return now }
	blocks := new(idgen.MemoryBlocks)
	rdb := newClient(t, miniredis.RunT(t).Addr())
	old := idgen.NewRedis(rdb, "test", blocks, idgen.WithBlockSize(100), idgen.WithClock(clock))
	t.Cleanup(old.Close)
	seg := idgen.NewSegments(blocks, "test", idgen.WithSteps(100, 100), idgen.WithClock(clock))
	t.Cleanup(seg.Close)
	var got [2][]idgen.ID
	for range 500 {
		for i, g := range []interface {
			Next(context.Context) (idgen.ID, error)
		}{old, seg} {
			id, err := g.Next(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			got[i] = append(got[i], id)
		}
	}
	checkUniqueAndIncreasing(t, got[:])
}

func drawSegments(t *testing.T, g *idgen.Segments, n int) []idgen.ID {
	t.Helper()
	ids := make([]idgen.ID, n)
	for i := range ids {
		var err error
		if ids[i], err = g.Next(t.Context()); err != nil {
			t.Fatalf("draw %d: %v", i+1, err)
		}
	}
	return ids
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// recordingBlocks records the reservations asked of it, and after down
// answers none: each waits for its context to end.
type recordingBlocks struct {
	idgen.Blocks
	mu     sync.Mutex
	asked  []reservation
	isDown bool
}

type reservation struct {
	key  string
	size uint32
}

func (r *recordingBlocks) Reserve(ctx context.Context, key string, floor uint64, size uint32) (uint64, uint64, error) {
	r.mu.Lock()
	r.asked = append(r.asked, reservation{key, size})
	isDown := r.isDown
	r.mu.Unlock()
	if isDown {
		<-ctx.Done()
		return 0, 0, ctx.Err()
	}
	return r.Blocks.Reserve(ctx, key, floor, size)
}

func (r *recordingBlocks) down() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.isDown = true
}

func (r *recordingBlocks) sizes() []uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s []uint32
	for _, a := range r.asked {
		s = append(s, a.size)
	}
	return s
}

func (r *recordingBlocks) keys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s []string
	for _, a := range r.asked {
		s = append(s, a.key)
	}
	return s
}
