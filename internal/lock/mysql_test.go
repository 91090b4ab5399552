package lock

import (
	"bufio"
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/glebarez/go-sqlite"  // registers "sqlite" with database/sql
	_ "github.com/go-sql-driver/mysql" // registers "mysql" with database/sql

	"seckill/internal/testkit"
)

// testMySQL gives the test a database of its own (see testkit.NewMySQL) and
// returns it and its DSN.
func testMySQL(t *testing.T) (*sql.DB, string) {
	t.Helper()
	dsn := testkit.NewMySQL(t)
	return testkit.OpenMySQL(t, dsn), dsn
}

func TestMySQLRefused(t *testing.T) {
	lite, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lite.Close() })
	for _, tc := range []struct {
		name string
		b    Backends
	}{
		{"no database", Backends{}},
		{"sqlite", Backends{SQL: lite, SQLDialect: "sqlite"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New("mysql", tc.b)
			if !errors.Is(err, ErrUnsupported) {
				t.Fatalf("got %v, want ErrUnsupported", err)
			}
			t.Log(err)
		})
	}
}

// TestMySQLFailFast: a held lock is refused at once with Wait 0, and a
// lease releases once.
func TestMySQLFailFast(t *testing.T) {
	db, _ := testMySQL(t)
	l := newLocker(t, "mysql", Backends{SQL: db, SQLDialect: "mysql"})
	key := "locktest:{" + rand.Text() + "}"
	ctx := t.Context()

	a, err := l.Acquire(ctx, key, Options{})
	if err != nil {
		t.Fatalf("A: %v", err)
	}
	if _, err := l.Acquire(ctx, key, Options{}); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("B while A holds: got %v, want ErrNotObtained", err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(waitCtx, key, Options{Wait: time.Minute}); err == nil {
		t.Fatal("B with a context that ends while A holds: obtained")
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("A release: %v", err)
	}
	if err := a.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("A second release: got %v, want ErrNotHeld", err)
	}
	b, err := l.Acquire(ctx, key, Options{})
	if err != nil {
		t.Fatalf("B after A released: %v", err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatalf("B release: %v", err)
	}
}

// The child process of TestMySQLAcrossProcesses finds its orders here.
const (
	envChildDSN = "LOCK_TEST_MYSQL_CHILD_DSN"
	envChildKey = "LOCK_TEST_MYSQL_CHILD_KEY"
)

const (
	mysqlWorkers = 4  // goroutines per process
	mysqlRounds  = 10 // increments per goroutine
)

// TestMySQLAcrossProcesses runs the same workload in this process and in a
// second OS process (this test binary again): goroutines in both increment a
// counter row with a non-atomic SELECT then UPDATE inside the mysql lock. No
// increment may be lost.
func TestMySQLAcrossProcesses(t *testing.T) {
	if dsn := os.Getenv(envChildDSN); dsn != "" {
		mysqlChild(t, dsn, os.Getenv(envChildKey))
		return
	}
	db, dsn := testMySQL(t)
	ctx := t.Context()
	if _, err := db.ExecContext(ctx, "CREATE TABLE counter (id INT PRIMARY KEY, n INT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO counter VALUES (1, 0)"); err != nil {
		t.Fatal(err)
	}
	key := "locktest:{" + rand.Text() + "}"

	child := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestMySQLAcrossProcesses$", "-test.count=1", "-test.v")
	child.Env = append(os.Environ(), envChildDSN+"="+dsn, envChildKey+"="+key)
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = child.Stdout
	if err := child.Start(); err != nil {
		t.Fatalf("starting the child process: %v", err)
	}
	// The child says "ready" when its goroutines wait at its gate; its
	// gate opens when its stdin closes, at the moment ours does.
	lines := bufio.NewScanner(stdout)
	var out strings.Builder
	for lines.Scan() && lines.Text() != "ready" {
		out.WriteString(lines.Text() + "\n")
	}
	gate := make(chan struct{})
	var wg sync.WaitGroup
	var errParent error
	wg.Go(func() { errParent = mysqlIncrements(ctx, db, key, gate) })
	close(gate)
	stdin.Close()
	wg.Wait()
	for lines.Scan() {
		out.WriteString(lines.Text() + "\n")
	}
	if err := child.Wait(); err != nil {
		t.Fatalf("child process: %v\n%s", err, out.String())
	}
	if errParent != nil {
		t.Fatal(errParent)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT n FROM counter WHERE id = 1").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if want := 2 * mysqlWorkers * mysqlRounds; n != want {
		t.Errorf("counter = %d after %d increments in two processes: %d lost", n, want, want-n)
	}
}

// mysqlChild is the second process's part.
func mysqlChild(t *testing.T, dsn, key string) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	gate := make(chan struct{})
	var wg sync.WaitGroup
	var errChild error
	wg.Go(func() { errChild = mysqlIncrements(t.Context(), db, key, gate) })
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes it
	close(gate)
	wg.Wait()
	if errChild != nil {
		t.Fatal(errChild)
	}
}

// mysqlIncrements releases mysqlWorkers goroutines when gate closes; each
// increments the counter mysqlRounds times under the lock on key.
func mysqlIncrements(ctx context.Context, db *sql.DB, key string, gate <-chan struct{}) error {
	l, err := NewMySQL(db, "mysql")
	if err != nil {
		return err
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range mysqlWorkers {
		wg.Go(func() {
			<-gate
			for range mysqlRounds {
				if err := mysqlIncrement(ctx, l, db, key); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func mysqlIncrement(ctx context.Context, l Locker, db *sql.DB, key string) error {
	lease, err := l.Acquire(ctx, key, Options{Wait: 30 * time.Second})
	if err != nil {
		return fmt.Errorf("acquiring: %w", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT n FROM counter WHERE id = 1").Scan(&n); err != nil {
		return fmt.Errorf("reading the counter: %w", err)
	}
	if _, err := db.ExecContext(ctx, "UPDATE counter SET n = ? WHERE id = 1", n+1); err != nil {
		return fmt.Errorf("writing the counter: %w", err)
	}
	if err := lease.Release(ctx); err != nil {
		return fmt.Errorf("releasing: %w", err)
	}
	return nil
}
