package admission_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"seckill/internal/admission"
)

// ticking is a clock that moves a second at each reading: every window is
// then past its time when it has its samples, so windows close by count and
// the tests wait for nothing.
func ticking() func() time.Time {
	var mu sync.Mutex
	now := time.Unix(0, 0)
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Second)
		return now
	}
}

// round fills the limit (every request it admits) and releases them all
// with rtt: the service busy at its limit, so no window is app-limited.
func round(t *testing.T, g *admission.Gradient, rtt time.Duration, failed bool) {
	t.Helper()
	var held []func(time.Duration, bool)
	for {
		release, err := g.Acquire()
		if errors.Is(err, admission.ErrOverloaded) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, release)
	}
	if len(held) == 0 {
		t.Fatalf("nothing admitted with %d in flight and a limit of %d", g.InFlight(), g.Limit())
	}
	for _, release := range held {
		release(rtt, failed)
	}
}

// rounds runs n rounds and checks the limit stays within [lo, hi] after each.
func rounds(t *testing.T, g *admission.Gradient, n int, rtt time.Duration, failed bool, lo, hi int) {
	t.Helper()
	for range n {
		round(t, g, rtt, failed)
		if l := g.Limit(); l < lo || l > hi {
			t.Fatalf("limit %d outside [%d, %d]", l, lo, hi)
		}
	}
}

// A request over the limit is refused at once, and a release makes room.
func TestGradientShedsBeyondItsLimit(t *testing.T) {
	g := admission.NewGradient(admission.GradientOptions{Initial: 5, Min: 1})
	var held []func(time.Duration, bool)
	for i := range 5 {
		release, err := g.Acquire()
		if err != nil {
			t.Fatalf("request %d within the limit of 5: %v", i+1, err)
		}
		held = append(held, release)
	}
	if _, err := g.Acquire(); !errors.Is(err, admission.ErrOverloaded) {
		t.Fatalf("a sixth request with 5 in flight: %v, want ErrOverloaded", err)
	}
	if g.InFlight() != 5 || g.Admitted() != 5 || g.Shed() != 1 {
		t.Fatalf("in flight %d, admitted %d, shed %d; want 5, 5, 1", g.InFlight(), g.Admitted(), g.Shed())
	}
	held[0](time.Millisecond, false)
	if _, err := g.Acquire(); err != nil {
		t.Fatalf("a request after a release: %v", err)
	}
}

// The limit grows while latency holds, falls when it rises well above the
// long-term RTT (requests queue), and grows back once it is low again.
func TestGradientFollowsLatency(t *testing.T) {
	g := admission.NewGradient(admission.GradientOptions{Initial: 20, Min: 4, Max: 1000, Now: ticking()})
	rounds(t, g, 30, time.Millisecond, false, 20, 1000)
	steady := g.Limit()
	if steady <= 20 {
		t.Fatalf("limit %d after 30 rounds at a steady 1ms, want it grown from 20", steady)
	}
	rounds(t, g, 30, 10*time.Millisecond, false, 4, steady)
	queued := g.Limit()
	if queued > steady/2 {
		t.Fatalf("limit %d after 30 rounds at 10ms (from 1ms), want at most half of %d", queued, steady)
	}
	rounds(t, g, 30, time.Millisecond, false, queued, 1000)
	if back := g.Limit(); back <= queued {
		t.Fatalf("limit %d after 30 rounds back at 1ms, want it above %d", back, queued)
	}
}

// Whatever the latency, the limit stays within [Min, Max], and reaches both.
func TestGradientStaysWithinBounds(t *testing.T) {
	g := admission.NewGradient(admission.GradientOptions{Initial: 8, Min: 6, Max: 12, Now: ticking()})
	rounds(t, g, 100, time.Millisecond, false, 6, 12)
	if g.Limit() != 12 {
		t.Fatalf("limit %d after 100 fast rounds, want Max 12", g.Limit())
	}
	// Failed and slow: nothing makes the limit grow, the gradient shrinks it.
	rounds(t, g, 100, time.Second, true, 6, 12)
	if g.Limit() != 6 {
		t.Fatalf("limit %d after 100 slow failed rounds, want Min 6", g.Limit())
	}
}

// Failures say nothing about spare capacity: however fast they come back,
// they never grow the limit.
func TestGradientFailuresDoNotGrowTheLimit(t *testing.T) {
	g := admission.NewGradient(admission.GradientOptions{Initial: 20, Now: ticking()})
	rounds(t, g, 50, time.Millisecond, true, 0, 20)
	rounds(t, g, 50, 100*time.Microsecond, true, 0, 20)
}

// A service with few requests in flight is not at its limit, whatever its
// latency: the limit stays where it is.
func TestGradientHoldsWhenAppLimited(t *testing.T) {
	g := admission.NewGradient(admission.GradientOptions{Initial: 20, Now: ticking()})
	for i := range 1000 {
		release, err := g.Acquire()
		if err != nil {
			t.Fatal(err)
		}
		rtt := time.Millisecond
		if i > 500 {
			rtt = time.Second // slow, but one at a time
		}
		release(rtt, false)
	}
	if g.Limit() != 20 {
		t.Fatalf("limit %d after 1,000 requests one at a time, want 20 unchanged", g.Limit())
	}
}

// Many goroutines released at once: exactly the limit is admitted, the
// rest shed, and once all are released nothing is in flight.
func TestGradientCountsExactlyUnderContention(t *testing.T) {
	const limit, goroutines = 20, 200
	g := admission.NewGradient(admission.GradientOptions{Initial: limit})
	var (
		start, stop = make(chan struct{}), make(chan struct{})
		acquired    sync.WaitGroup
		done        sync.WaitGroup
		mu          sync.Mutex
		admitted    int
	)
	acquired.Add(goroutines)
	done.Add(goroutines)
	for range goroutines {
		go func() {
			defer done.Done()
			<-start
			release, err := g.Acquire()
			if err == nil {
				mu.Lock()
				admitted++
				mu.Unlock()
			}
			acquired.Done()
			if err != nil {
				return
			}
			<-stop // held until every goroutine has tried
			release(time.Millisecond, false)
		}()
	}
	close(start)
	acquired.Wait()
	if admitted != limit || g.InFlight() != limit || g.Admitted() != limit || g.Shed() != goroutines-limit {
		t.Fatalf("admitted %d, in flight %d, counted admitted %d, shed %d; want %d, %d, %d, %d",
			admitted, g.InFlight(), g.Admitted(), g.Shed(), limit, limit, limit, goroutines-limit)
	}
	close(stop)
	done.Wait()
	if g.InFlight() != 0 {
		t.Fatalf("%d in flight after every release", g.InFlight())
	}

	// And churning: acquire, release, again, from every goroutine at once.
	var churn sync.WaitGroup
	var ok, shed int64
	for range 50 {
		churn.Add(1)
		go func() {
			defer churn.Done()
			var o, s int64
			for range 500 {
				release, err := g.Acquire()
				if err != nil {
					s++
					continue
				}
				o++
				release(time.Duration(o%3)*time.Millisecond, o%7 == 0)
			}
			mu.Lock()
			ok, shed = ok+o, shed+s
			mu.Unlock()
		}()
	}
	churn.Wait()
	if g.InFlight() != 0 || g.Admitted() != limit+ok || g.Shed() != goroutines-limit+shed {
		t.Fatalf("after churning: in flight %d, admitted %d, shed %d; want 0, %d, %d",
			g.InFlight(), g.Admitted(), g.Shed(), limit+ok, goroutines-limit+shed)
	}
}

func BenchmarkGradientAcquireRelease(b *testing.B) {
	g := admission.NewGradient(admission.GradientOptions{Initial: 1000, Max: 1000})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if release, err := g.Acquire(); err == nil {
				release(time.Millisecond, false)
			}
		}
	})
}
