package testkit

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"seckill/internal/freeport"
	"seckill/internal/testkit/child"
)

// MySQLServer is a MySQL server of the test's own, in a process of its own, that
// the test may pause (SIGSTOP) and resume: mariadbd when it is on PATH, else
// go-mysql-server. It is never the server MYSQL_DSN names, which is shared.
type MySQLServer struct {
	// Kind is "mariadbd" or "go-mysql-server".
	Kind string
	addr string
	cmd  *exec.Cmd
	// exited is closed once the process has exited.
	exited chan struct{}
}

// OwnMySQLOptions configure a server of the test's own.
type OwnMySQLOptions struct {
	// MaxConnections is mariadbd's max_connections. Default: MariaDB's (151).
	// go-mysql-server has no such limit.
	MaxConnections int
}

// OwnMySQL starts a server of the test's own, stopped when the test ends. Its
// default character set is the server's (latin1 for MariaDB).
func OwnMySQL(tb testing.TB, opt OwnMySQLOptions) *MySQLServer {
	tb.Helper()
	var s *MySQLServer
	var err error
	if HaveMariaDB() {
		s, err = startMariaDB(tb, opt)
	} else {
		tb.Log("mariadbd is not on PATH: the server of the test's own is go-mysql-server")
		s, err = startGMS(tb)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// HaveMariaDB reports whether mariadbd and mariadb-install-db are on PATH.
func HaveMariaDB() bool {
	for _, name := range []string{"mariadbd", "mariadb-install-db"} {
		if _, err := exec.LookPath(name); err != nil {
			return false
		}
	}
	return true
}

// DSN is the DSN of database db on s, as root without a password.
func (s *MySQLServer) DSN(db string) string {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr, cfg.DBName, cfg.ParseTime = "root", "tcp", s.addr, db, true
	return cfg.FormatDSN()
}

// Database creates a database on s with the CREATE DATABASE options given
// (e.g. "CHARACTER SET latin1") and returns its DSN.
func (s *MySQLServer) Database(tb testing.TB, options string) string {
	tb.Helper()
	admin := OpenMySQL(tb, s.DSN(""))
	// Its connection is closed at once, not at the test's end: a test that
	// counts the server's connections counts the ones it makes.
	defer admin.Close()
	name := "seckill_" + strings.ToLower(rand.Text())
	if _, err := admin.ExecContext(tb.Context(), "CREATE DATABASE `"+name+"` "+options); err != nil {
		tb.Fatalf("creating database %s: %v", name, err)
	}
	return s.DSN(name)
}

// Pause stops the server's whole process: connections stay open and
// queries wait, as behind a frozen VM or a saturated disk.
func (s *MySQLServer) Pause(tb testing.TB) {
	tb.Helper()
	if err := child.Freeze(s.cmd.Process); err != nil {
		tb.Fatalf("pausing %s: %v", s.Kind, err)
	}
}

// Resume continues a paused server.
func (s *MySQLServer) Resume(tb testing.TB) {
	tb.Helper()
	if err := child.Thaw(s.cmd.Process); err != nil {
		tb.Fatalf("resuming %s: %v", s.Kind, err)
	}
}

func (s *MySQLServer) stop() {
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// watch starts the process and closes s.exited when it ends.
func (s *MySQLServer) watch(tb testing.TB) error {
	// Killed with the test process: neither server watches its stdin.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", s.Kind, err)
	}
	s.exited = make(chan struct{})
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	tb.Cleanup(s.stop)
	return nil
}

// ready polls until the server answers, or exits, or 30s pass.
func (s *MySQLServer) ready(ctx context.Context) error {
	db, err := sql.Open("mysql", s.DSN(""))
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := db.PingContext(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("%s exited: %w", s.Kind, err)
		case <-ctx.Done():
			return fmt.Errorf("%s did not answer within 30s: %w", s.Kind, err)
		case <-tick.C:
		}
	}
}

var installing sync.Mutex

// startMariaDB initializes a data directory and starts mariadbd on it,
// without grant tables: root needs no password, and nothing else logs in.
func startMariaDB(tb testing.TB, opt OwnMySQLOptions) (*MySQLServer, error) {
	// A short path: the socket's must fit in 108 bytes.
	dir, err := os.MkdirTemp("", "mariadb-")
	if err != nil {
		return nil, err
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	me := "root"
	if u, err := user.Current(); err == nil {
		me = u.Username
	}
	data := filepath.Join(dir, "data")
	// A temporary directory of its own: with /tmp shared, one install's
	// temporary tables went missing under it, most likely removed by a
	// mariadbd starting beside it, which clears the "#sql…" files of its
	// tmpdir (CI on 2f5e979: "Could not
	// remove temporary table '/tmp/#sql-temptable-…'", then "Unknown table
	// 'mysql.tmp_user_sys'").
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, err
	}
	small := []string{"--innodb-buffer-pool-size=16M", "--innodb-log-file-size=8M", "--tmpdir=" + tmp}
	install := exec.CommandContext(tb.Context(), "mariadb-install-db", append([]string{"--no-defaults", "--datadir=" + data,
		"--user=" + me, "--auth-root-authentication-method=normal", "--skip-test-db"}, small...)...)
	installing.Lock() // two at once fail, saying nothing
	out, err := install.CombinedOutput()
	installing.Unlock()
	if err != nil {
		return nil, fmt.Errorf("mariadb-install-db: %w\n%s", err, out)
	}
	port, err := freeport.Port()
	if err != nil {
		return nil, err
	}
	args := append([]string{"--no-defaults", "--datadir=" + data, "--user=" + me,
		"--bind-address=127.0.0.1", "--port=" + strconv.Itoa(port), "--socket=" + filepath.Join(dir, "sock"),
		"--pid-file=" + filepath.Join(dir, "pid"), "--log-error=" + filepath.Join(dir, "error.log"),
		"--skip-grant-tables", "--skip-name-resolve", "--skip-log-bin"}, small...)
	if opt.MaxConnections > 0 {
		args = append(args, "--max-connections="+strconv.Itoa(opt.MaxConnections))
	}
	s := &MySQLServer{Kind: "mariadbd", addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: exec.Command("mariadbd", args...)}
	if err := s.watch(tb); err != nil {
		return nil, err
	}
	if err := s.ready(tb.Context()); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
		return nil, fmt.Errorf("%w\n%s", err, log)
	}
	return s, nil
}

// The go-mysql-server binary is built once per test process; each server
// is a process of its own, so that pausing one touches no other test.
var (
	gmsOnce sync.Once
	gmsExe  string
	gmsErr  error
)

func startGMS(tb testing.TB) (*MySQLServer, error) {
	gmsOnce.Do(func() { gmsExe, gmsErr = buildGMS() })
	if gmsErr != nil {
		return nil, gmsErr
	}
	s := &MySQLServer{Kind: "go-mysql-server", cmd: exec.Command(gmsExe)}
	stdin, err := s.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	tb.Cleanup(func() { stdin.Close() })
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := s.watch(tb); err != nil {
		return nil, err
	}
	line := make([]byte, 0, 64)
	buf := make([]byte, 1)
	for len(line) == 0 || line[len(line)-1] != '\n' {
		if _, err := stdout.Read(buf); err != nil {
			return nil, fmt.Errorf("go-mysql-server printed no address: %w", err)
		}
		line = append(line, buf[0])
	}
	s.addr = strings.TrimSpace(string(line))
	return s, s.ready(tb.Context())
}

// buildGMS builds the gms command into the user's cache directory. Every
// test process builds it again (the go command's cache makes that a link),
// into a file of its own that it then renames over the last one: a process
// running the old file keeps it.
func buildGMS() (string, error) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return "", errNoGo
	}
	dir, err := gmsDir(goCmd)
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	out := filepath.Join(cache, "seckill")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	exe := filepath.Join(out, "gms")
	tmp := exe + "." + strconv.Itoa(os.Getpid())
	build := exec.Command(goCmd, "build", "-o", tmp, ".")
	build.Dir = dir
	if b, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %w\n%s", dir, err, b)
	}
	if err := os.Rename(tmp, exe); err != nil {
		return "", err
	}
	return exe, nil
}
