// This file gives tests a MySQL database of their own: on the server
// MYSQL_DSN names when it is set (as in CI), else on go-mysql-server, which
// it builds and starts with the go command (see testdata/gms), so that
// the same tests run on a machine with nothing but Go. Either is reached over
// loopback TCP, so a second process the test starts can use the DSN too.

package testkit

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// NewMySQL creates a database of the test's own and returns its DSN; the
// database is dropped when the test ends. It logs when it runs on the
// embeddedMySQL server.
func NewMySQL(tb testing.TB) string {
	tb.Helper()
	dsn := os.Getenv("MYSQL_DSN")
	if dsn == "" {
		var err error
		if dsn, err = embeddedMySQL(); errors.Is(err, errNoGo) {
			Skipf(tb, NoGo, "MYSQL_DSN is unset, and %v", err)
		} else if err != nil {
			tb.Fatal(err)
		}
		tb.Log("MYSQL_DSN is unset: running on go-mysql-server, with MySQL's GET_LOCK (see internal/testkit/testdata/gms)")
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		tb.Fatalf("parsing the DSN: %v", err)
	}
	admin, err := sql.Open("mysql", dsn)
	if err != nil {
		tb.Fatalf("opening %s: %v", dsn, err)
	}
	tb.Cleanup(func() { admin.Close() })
	cfg.DBName = "seckill_test_" + strings.ToLower(rand.Text())
	if _, err := admin.ExecContext(tb.Context(), "CREATE DATABASE `"+cfg.DBName+"`"); err != nil {
		tb.Fatalf("creating database %s: %v", cfg.DBName, err)
	}
	tb.Cleanup(func() {
		// tb.Context() is already done during cleanup.
		if _, err := admin.ExecContext(context.Background(), "DROP DATABASE `"+cfg.DBName+"`"); err != nil {
			tb.Errorf("dropping database %s: %v", cfg.DBName, err)
		}
	})
	return cfg.FormatDSN()
}

// OpenMySQL opens the database of dsn, checks that it answers, and closes it when
// the test ends (before NewMySQL drops it: cleanups run last-in first-out).
func OpenMySQL(tb testing.TB, dsn string) *sql.DB {
	tb.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		tb.Fatalf("opening %s: %v", dsn, err)
	}
	tb.Cleanup(func() { db.Close() })
	if err := db.PingContext(tb.Context()); err != nil {
		tb.Fatalf("connecting to %s: %v", dsn, err)
	}
	return db
}

var errNoGo = errors.New("the go command, which builds the embeddedMySQL MySQL, is not on PATH")

// The embeddedMySQL server is one per test process: started by the first test
// that needs it, it ends with the process, when its standard input closes.
var (
	embeddedOnce  sync.Once
	embeddedDSN   string
	embeddedErr   error
	embeddedStdin io.WriteCloser // held, never closed: the process's end closes it
)

func embeddedMySQL() (string, error) {
	embeddedOnce.Do(func() { embeddedDSN, embeddedErr = startEmbeddedMySQL() })
	return embeddedDSN, embeddedErr
}

func startEmbeddedMySQL() (string, error) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return "", errNoGo
	}
	dir, err := gmsDir(goCmd)
	if err != nil {
		return "", err
	}
	cmd := exec.Command(goCmd, "run", ".")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if embeddedStdin, err = cmd.StdinPipe(); err != nil {
		return "", err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("go run %s: %w", dir, err)
	}
	// The first run on a machine compiles go-mysql-server: a minute or so.
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = cmd.Wait()
		return "", fmt.Errorf("go run %s: %w\n%s", dir, err, stderr.String())
	}
	return fmt.Sprintf("root:@tcp(%s)/test?parseTime=true", strings.TrimSpace(addr)), nil
}

// gmsDir is the directory of the gms command.
func gmsDir(goCmd string) (string, error) {
	gomod, err := exec.Command(goCmd, "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("finding the module: %w", err)
	}
	return filepath.Join(filepath.Dir(strings.TrimSpace(string(gomod))), "internal", "testkit", "testdata", "gms"), nil
}
