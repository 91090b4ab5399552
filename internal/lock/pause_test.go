package lock

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/testkit"
)

// envPausedHolder makes a helper process hold a watchdog lock on the key
// it names and report, on stdout, "held" and later "lost".
const envPausedHolder = "LOCK_TEST_PAUSED_HOLDER"

// TestWatchdogPausedProcessLosesLock is the watchdog's limit: it renews a
// long hold in a live process (TestWatchdogLongHoldKeepsLock), but a pause
// of the whole process (SIGSTOP here; a stop-the-world pause or a frozen VM
// in production) stops the renewals with it. The lock expires, another
// holder takes it while the paused one still believes it holds it, and the
// paused one learns it lost the lock only when it wakes.
func TestWatchdogPausedProcessLosesLock(t *testing.T) {
	srv := testkit.RealRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	key := newKey(t, rdb)

	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestPausedHolderProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envPausedHolder+"="+key, envRedis+"="+srv.Addr())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l := strings.TrimSpace(sc.Text()); l == "held" || l == "lost" {
				lines <- l
			}
		}
		close(lines)
	}()
	expect := func(want string) {
		t.Helper()
		select {
		case got := <-lines:
			if got != want {
				t.Fatalf("the holder said %q, want %q", got, want)
			}
		case <-time.After(patience):
			t.Fatalf("the holder did not say %q", want)
		}
	}
	expect("held")

	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The holder's renewals stop with it: its lock expires after one TTL,
	// and this process takes it while the holder, frozen, holds it still.
	l := NewWatchdog(rdb)
	t.Cleanup(func() { l.Close() })
	b, err := l.Acquire(t.Context(), key, Options{TTL: longTTL, Wait: patience})
	if err != nil {
		t.Fatalf("taking the lock while its holder is paused: %v, want it obtained once the lease ran out", err)
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	expect("lost") // too late: both held the lock at once
	if err := b.Release(t.Context()); err != nil {
		t.Errorf("the second holder's release: %v", err)
	}
}

// TestPausedHolderProcess is the holder of TestWatchdogPausedProcessLosesLock,
// in a process of its own.
func TestPausedHolderProcess(t *testing.T) {
	key := os.Getenv(envPausedHolder)
	if key == "" {
		return
	}
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(envRedis)})
	defer rdb.Close()
	l := NewWatchdog(rdb)
	defer l.Close()
	lease, err := l.Acquire(t.Context(), key, Options{TTL: shortTTL})
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("held\n")
	select {
	case <-Lost(lease):
		os.Stdout.WriteString("lost\n")
	case <-time.After(2 * patience):
		t.Fatal("the lease was never reported lost")
	}
}
