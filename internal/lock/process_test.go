package lock

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/testkit"
)

// The cross-process test runs the contract's critical section in several OS
// processes at once: this test binary, started again with -test.run set to
// TestHelperProcess and the work described in the environment.
const (
	envHelper  = "LOCK_TEST_HELPER" // the strategy to run; set only in a helper process
	envRedis   = "LOCK_TEST_REDIS"  // the address of the test's Redis
	envKey     = "LOCK_TEST_KEY"
	envCounter = "LOCK_TEST_COUNTER"
	envReady   = "LOCK_TEST_READY" // list a helper pushes to once connected
	envGate    = "LOCK_TEST_GATE"  // list the helpers block on until all are ready
)

// helperWork is what each helper process does. Its holds are long enough
// that each process is inside the critical section for 200ms or more: two
// processes started together that do not exclude each other cannot miss.
var helperWork = contendConfig{workers: 4, rounds: 5, hold: 10 * time.Millisecond}

// TestCrossProcess shows that a Redis lock excludes holders in different
// processes, and that local does not: each process has its own mutex.
func TestCrossProcess(t *testing.T) {
	const procs = 2
	for _, tc := range []struct {
		name string
		safe bool
	}{
		{"local", false},
		{"token", true},
		{"reentrant", true},
		{"watchdog", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := testkit.RealRedis(t)
			b := Backends{Redis: srv.Client}
			key, counter := newKey(t, b.Redis), newKey(t, b.Redis)
			ready, gate := newKey(t, b.Redis), newKey(t, b.Redis)

			cmds := make([]*exec.Cmd, procs)
			outs := make([]*bytes.Buffer, procs)
			for i := range cmds {
				cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
				cmd.Env = append(os.Environ(),
					envHelper+"="+tc.name, envRedis+"="+srv.Addr(), envKey+"="+key, envCounter+"="+counter, envReady+"="+ready, envGate+"="+gate)
				outs[i] = new(bytes.Buffer)
				cmd.Stdout, cmd.Stderr = outs[i], outs[i]
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				cmds[i] = cmd
			}
			// Open the gate only when every process is connected, so that
			// their critical sections contend from the first.
			for range procs {
				if err := b.Redis.BLPop(t.Context(), patience, ready).Err(); err != nil {
					for i, cmd := range cmds {
						_ = cmd.Process.Kill()
						_ = cmd.Wait() // the output is complete only after Wait
						t.Logf("helper process %d:\n%s", i, outs[i])
					}
					t.Fatalf("waiting for the helper processes: %v", err)
				}
			}
			if err := b.Redis.RPush(t.Context(), gate, make([]any, procs)...).Err(); err != nil {
				t.Fatal(err)
			}
			var holds []hold
			for i, cmd := range cmds {
				if err := cmd.Wait(); err != nil {
					t.Fatalf("helper process %d: %v\n%s", i, err, outs[i])
				}
				hs, err := parseHolds(outs[i], i)
				if err != nil {
					t.Fatal(err)
				}
				holds = append(holds, hs...)
			}
			if want := procs * helperWork.workers * helperWork.rounds; len(holds) != want {
				t.Fatalf("%d holds reported; want %d", len(holds), want)
			}
			got, err := b.Redis.Get(t.Context(), counter).Int()
			if err != nil {
				t.Fatal(err)
			}
			var across int
			for _, p := range overlaps(holds) {
				if p[0].proc != p[1].proc {
					across++
				}
			}
			t.Logf("%d processes, %d acquisitions, counter %d, %d holds overlapping across processes", procs, len(holds), got, across)
			switch {
			case tc.safe && (got != len(holds) || across > 0):
				t.Errorf("counter %d after %d increments, %d overlaps across processes; want no lost update, no overlap", got, len(holds), across)
			case !tc.safe && across == 0:
				t.Errorf("no holds overlapped across processes; want local's mutexes to let both processes in at once")
			}
		})
	}
}

// TestHelperProcess is the body of a helper process of TestCrossProcess; in
// a normal test run it does nothing.
func TestHelperProcess(t *testing.T) {
	name := os.Getenv(envHelper)
	if name == "" {
		return
	}
	b := Backends{Redis: redis.NewClient(&redis.Options{Addr: os.Getenv(envRedis)})}
	defer b.Redis.Close()
	l := newLocker(t, name, b)
	ctx := t.Context()
	if err := b.Redis.RPush(ctx, os.Getenv(envReady), 1).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.Redis.BLPop(ctx, patience, os.Getenv(envGate)).Err(); err != nil {
		t.Fatalf("waiting at the gate: %v", err)
	}
	holds, err := contend(ctx, l, b.Redis, os.Getenv(envKey), os.Getenv(envCounter), helperWork)
	if err != nil {
		t.Fatal(err)
	}
	// Wall-clock nanoseconds: monotonic readings mean nothing in another
	// process, and the processes share one machine's clock.
	for _, h := range holds {
		fmt.Printf("hold %d %d\n", h.start.UnixNano(), h.end.UnixNano())
	}
}

// parseHolds reads the holds a helper process printed.
func parseHolds(out *bytes.Buffer, proc int) ([]hold, error) {
	var holds []hold
	sc := bufio.NewScanner(bytes.NewReader(out.Bytes()))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || f[0] != "hold" {
			continue // the test framework's own output
		}
		start, err1 := strconv.ParseInt(f[1], 10, 64)
		end, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("process %d printed %q", proc, sc.Text())
		}
		holds = append(holds, hold{start: time.Unix(0, start), end: time.Unix(0, end), proc: proc})
	}
	return holds, sc.Err()
}
