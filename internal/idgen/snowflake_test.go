package idgen_test

import (
	"errors"
	"testing"
	"time"

	"seckill/internal/idgen"
)

// parts takes a Snowflake ID apart: milliseconds since the epoch, worker,
// sequence.
func parts(id int64) (ms, worker, seq int64) {
	return id >> 22, id >> 12 & idgen.MaxWorkerID, id & (1<<12 - 1)
}

func at(ms int64) time.Time { return time.UnixMilli(idgen.EpochUnix*1000 + ms) }

func TestSnowflakeLayout(t *testing.T) {
	g, err := idgen.NewSnowflake(5, idgen.WithClock(func() time.Time { return at(1234) }))
	if err != nil {
		t.Fatal(err)
	}
	for seq := range int64(3) {
		id, err := g.Next()
		if err != nil {
			t.Fatal(err)
		}
		if want := 1234<<22 | 5<<12 | seq; id != want {
			t.Errorf("id %d = %b, want %b", seq, id, want)
		}
	}
}

// TestSnowflakeUnique has 8 goroutines, released at once, take 200,000 IDs
// from one generator as fast as they can. Whether a millisecond's sequence
// runs out depends on the machine's speed, so the test only logs how often;
// TestSnowflakeWaitsForNextMillisecond makes it happen.
func TestSnowflakeUnique(t *testing.T) {
	const worker = 1023
	g, err := idgen.NewSnowflake(worker)
	if err != nil {
		t.Fatal(err)
	}
	got := releaseAtOnce(t, 8, 25_000, func(int) (int64, error) { return g.Next() })
	checkUniqueAndIncreasing(t, got)
	spent := 0 // milliseconds whose 4096 IDs were all issued
	for _, ids := range got {
		for _, id := range ids {
			_, w, seq := parts(id)
			if w != worker {
				t.Fatalf("id %d carries worker %d, want %d", id, w, worker)
			}
			if seq == 1<<12-1 {
				spent++
			}
		}
	}
	t.Logf("%d milliseconds ran out of sequence numbers", spent)
}

func TestSnowflakeWorkerID(t *testing.T) {
	tests := []struct {
		worker  int64
		wantErr error
	}{
		{-1, idgen.ErrWorkerID},
		{0, nil},
		{idgen.MaxWorkerID, nil},
		{idgen.MaxWorkerID + 1, idgen.ErrWorkerID},
	}
	for _, tt := range tests {
		_, err := idgen.NewSnowflake(tt.worker)
		if !errors.Is(err, tt.wantErr) {
			t.Errorf("NewSnowflake(%d) error %v, want %v", tt.worker, err, tt.wantErr)
		}
	}
}

// TestSnowflakeWaitsForNextMillisecond spends a millisecond's 4096 IDs on a
// stopped clock and checks that the next Next waits until the clock moves.
func TestSnowflakeWaitsForNextMillisecond(t *testing.T) {
	clk := newClock(at(10))
	g, err := idgen.NewSnowflake(1, idgen.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	for want := range int64(4096) {
		id, err := g.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ms, _, seq := parts(id); ms != 10 || seq != want {
			t.Fatalf("id %d: ms %d seq %d, want ms 10 seq %d", want, ms, seq, want)
		}
	}
	reads := clk.Reads()
	type result struct {
		id  int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		id, err := g.Next()
		done <- result{id, err}
	}()
	// Once Next has read the clock twice more it is waiting: the first read
	// found the sequence spent, the second a clock still at 10ms.
	for deadline := time.Now().Add(10 * time.Second); clk.Reads() < reads+2; {
		if time.Now().After(deadline) {
			t.Fatal("Next never read the clock again")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case r := <-done:
		t.Fatalf("Next returned %d, %v on a spent millisecond", r.id, r.err)
	default:
	}
	clk.Set(at(11))
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if ms, _, seq := parts(r.id); ms != 11 || seq != 0 {
		t.Errorf("after the wait: ms %d seq %d, want ms 11 seq 0", ms, seq)
	}
}

// TestSnowflakeClockBackwards steps an injected clock back and forth.
func TestSnowflakeClockBackwards(t *testing.T) {
	clk := newClock(at(100))
	g, err := idgen.NewSnowflake(1, idgen.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		ms      int64
		wantErr error
		wantMS  int64
		wantSeq int64
	}{
		{100, nil, 100, 0},
		{100, nil, 100, 1},
		{99, idgen.ErrClockBackwards, 0, 0}, // refused: it would sort below the last ID
		{50, idgen.ErrClockBackwards, 0, 0},
		{100, nil, 100, 2}, // caught up: the millisecond's sequence goes on
		{101, nil, 101, 0},
	}
	for i, s := range steps {
		clk.Set(at(s.ms))
		id, err := g.Next()
		if !errors.Is(err, s.wantErr) {
			t.Fatalf("step %d (clock %dms): error %v, want %v", i, s.ms, err, s.wantErr)
		}
		if err != nil {
			t.Logf("step %d: %v", i, err)
			continue
		}
		if ms, _, seq := parts(id); ms != s.wantMS || seq != s.wantSeq {
			t.Errorf("step %d: ms %d seq %d, want ms %d seq %d", i, ms, seq, s.wantMS, s.wantSeq)
		}
	}
}

func TestSnowflakeRange(t *testing.T) {
	tests := []struct {
		name string
		now  time.Time
		want error
	}{
		{"before the epoch", at(-1), idgen.ErrBeforeEpoch},
		{"the epoch", at(0), nil},
		{"last millisecond", at(1<<41 - 1), nil},
		{"past 41 bits", at(1 << 41), idgen.ErrTimeOverflow},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := idgen.NewSnowflake(0, idgen.WithClock(func() time.Time { return tt.now }))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := g.Next(); !errors.Is(err, tt.want) {
				t.Errorf("Next() error %v, want %v", err, tt.want)
			}
		})
	}
}
