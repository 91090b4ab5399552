package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"seckill/internal/app"
)

// serveFlag is the hidden first argument that turns the harness binary into
// one service instance of a cluster (see startCluster).
const serveFlag = "-serve"

// urlPrefix starts the line a -serve child prints once it listens.
const urlPrefix = "listening "

// cluster is the service instances a run drives: the first in this process,
// the others child processes sharing its Redis and database.
type cluster struct {
	URLs     []string
	first    *app.Server
	children []*exec.Cmd
	stdins   []io.Closer
	tmpDir   string
}

// serviceConfig is the service configuration for the instances the harness
// starts: the environment's backends (REDIS_ADDR, MYSQL_DSN, …), a free
// loopback port, no rate limit and no demo product.
func serviceConfig(getenv func(string) string, lockTTL, lockWait time.Duration) (app.Config, error) {
	cfg, _, err := app.ParseConfig("service", nil, getenv)
	if err != nil {
		return cfg, fmt.Errorf("reading the service configuration from the environment: %w", err)
	}
	cfg.Addr = "127.0.0.1:0"
	cfg.RateLimit = 0
	cfg.DemoStock = 0
	cfg.LogLevel = "warn"
	if lockTTL > 0 {
		cfg.LockTTL = lockTTL
	}
	if lockWait > 0 {
		cfg.LockWait = lockWait
	}
	return cfg, nil
}

// startCluster starts k instances on cfg. They must share the stock and the
// orders, so on the embedded default the first instance's Redis (a real TCP
// server on loopback) and one SQLite file in a temporary directory serve all.
// The children are this binary re-executed with -serve; each exits when its
// stdin closes, so none outlives the harness even if it is killed.
func startCluster(ctx context.Context, k int, cfg app.Config, stderr io.Writer) (c *cluster, err error) {
	c = &cluster{}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	if k > 1 && cfg.MySQLDSN == "" && cfg.SQLitePath == "" {
		if c.tmpDir, err = os.MkdirTemp("", "seckill-loadtest-"); err != nil {
			return c, fmt.Errorf("creating the shared SQLite directory: %w", err)
		}
		cfg.SQLitePath = filepath.Join(c.tmpDir, "seckill.db")
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if c.first, err = app.Start(ctx, cfg, log, app.Extras{}); err != nil {
		return c, fmt.Errorf("starting the service: %w", err)
	}
	c.URLs = append(c.URLs, c.first.URL)
	if k == 1 {
		return c, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return c, fmt.Errorf("finding the harness binary to start instances: %w", err)
	}
	args := []string{serveFlag,
		"-addr", "127.0.0.1:0", "-redis", c.first.RedisAddr(), "-mysql", cfg.MySQLDSN, "-sqlite", cfg.SQLitePath,
		"-rate-limit", "0", "-demo-stock", "0", "-lock-ttl", cfg.LockTTL.String(),
		"-lock-wait", cfg.LockWait.String(), "-log-level", "warn",
	}
	for i := 1; i < k; i++ {
		url, err := c.spawn(ctx, exe, args, stderr)
		if err != nil {
			return c, fmt.Errorf("starting instance %d: %w", i+1, err)
		}
		c.URLs = append(c.URLs, url)
	}
	return c, nil
}

// spawnTimeout bounds a child's start-up.
const spawnTimeout = 30 * time.Second

func (c *cluster) spawn(ctx context.Context, exe string, args []string, stderr io.Writer) (string, error) {
	cmd := exec.Command(exe, args...)
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	c.children = append(c.children, cmd)
	c.stdins = append(c.stdins, stdin)

	type line struct {
		s   string
		err error
	}
	got := make(chan line, 1)
	go func() { // ends when the child prints or its stdout closes (stop waits for it)
		s, err := bufio.NewReader(stdout).ReadString('\n')
		got <- line{s, err}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	timer := time.NewTimer(spawnTimeout)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case <-timer.C:
		return "", fmt.Errorf("no address printed within %s", spawnTimeout)
	case l := <-got:
		url, ok := strings.CutPrefix(strings.TrimSpace(l.s), urlPrefix)
		if !ok {
			return "", fmt.Errorf("the instance exited before listening (%q, %v)", l.s, l.err)
		}
		return url, nil
	}
}

// childGrace is how long a child may take to shut down before it is killed.
const childGrace = 10 * time.Second

// stop ends the children (stdin closed and SIGTERM, SIGKILL after a grace
// period), waits for each, then shuts the first instance down.
func (c *cluster) stop() error {
	var errs []error
	for _, in := range c.stdins {
		in.Close()
	}
	for _, cmd := range c.children {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, cmd := range c.children {
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				errs = append(errs, fmt.Errorf("waiting for instance %d: %w", cmd.Process.Pid, err))
			}
		case <-time.After(childGrace):
			_ = cmd.Process.Kill()
			<-done
			errs = append(errs, fmt.Errorf("instance %d did not stop within %s: killed", cmd.Process.Pid, childGrace))
		}
	}
	c.children, c.stdins = nil, nil
	if c.first != nil {
		ctx, cancel := context.WithTimeout(context.Background(), childGrace)
		defer cancel()
		if err := c.first.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("shutting the service down: %w", err))
		}
		c.first = nil
	}
	if c.tmpDir != "" {
		if err := os.RemoveAll(c.tmpDir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// serve is the -serve mode: one service instance that prints its URL, then
// serves until its stdin closes (the harness is gone) or it is signalled.
func serve(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	cfg, fs, err := app.ParseConfig("loadtest "+serveFlag, args, getenv)
	if err != nil {
		fs.SetOutput(stderr)
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := app.Start(ctx, cfg, log, app.Extras{})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, urlPrefix+srv.URL)
	parentGone := make(chan struct{})
	go func() { // returns when stdin closes, which also happens when this process exits
		_, _ = io.Copy(io.Discard, stdin)
		close(parentGone)
	}()
	select {
	case <-ctx.Done():
	case <-parentGone:
	case <-srv.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	return srv.Shutdown(sctx)
}
