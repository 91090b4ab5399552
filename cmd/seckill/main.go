// Command seckill serves the flash-sale lab: with no configuration on an
// embedded Redis and an embedded SQLite, with REDIS_ADDR and MYSQL_DSN on
// real servers. Run it with -h for every knob.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"seckill/internal/app"
	"seckill/internal/telemetry"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "seckill:", err)
		os.Exit(1)
	}
}

// run starts the service and serves until ctx ends, then shuts down:
// in-flight orders finish, then Redis and the database are closed. -h
// prints the usage and returns nil: asking for help is not a failure.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 1 && args[1] == "-healthcheck" {
		return healthcheck(ctx, args[2:])
	}
	cfg, fs, err := app.ParseConfig(args[0], args[1:], getenv)
	if err != nil {
		usage(stderr, fs)
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	log := slog.New(telemetry.LogHandler(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})))
	// The full configuration is a long line: asked for (-v), or at debug
	// level. Said unasked at every start, it read as an error (issue 41,
	// finding 5); the serving line says what a start needs.
	if cfg.Verbose {
		log.Info("configuration", "config", cfg.String())
	} else {
		log.Debug("configuration", "config", cfg.String())
	}
	stopTracing, err := telemetry.Setup(ctx, getenv)
	if err != nil {
		return err
	}
	defer func() {
		// The spans still batched are flushed, within a bound of their own.
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := stopTracing(sctx); err != nil {
			log.Warn("flushing the last spans", "error", err)
		}
	}()
	if telemetry.On() {
		log.Info("tracing on: OTLP export configured by the OTEL_* environment")
	}
	if len(cfg.AllowedHosts) == 0 && !loopback(cfg.Addr) {
		log.Warn("listening beyond loopback without ALLOWED_HOSTS: requests that reach " + cfg.Addr +
			" on a non-loopback address are served under any Host name; set ALLOWED_HOSTS to the names clients use")
	}

	srv, err := app.Start(ctx, cfg, log, extras(cfg, log))
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, servingLine(srv, cfg))

	select {
	case <-ctx.Done():
		log.Info("shutting down", "timeout", cfg.ShutdownTimeout)
	case <-srv.Done():
		log.Error("server stopped", "error", srv.Err())
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	log.Info("stopped")
	return nil
}

// servingLine says the service is up: what it serves, where, on what, the
// operator token, which the page's product forms ask for, and the class
// token, which a class's students type for the lab and the course.
func servingLine(srv *app.Server, cfg app.Config) string {
	demo := ""
	if cfg.Demo() {
		demo = "; demo accounts: a name alone signs in"
	}
	return fmt.Sprintf("seckill serving %s (%s: Redis %s, %s%s); %s; %s",
		servedAt(srv.URL, net.InterfaceAddrs), srv.Mode(), srv.RedisAddr(), describeSQL(cfg), demo, srv.OperatorTokenNote(), srv.ClassTokenNote())
}

// servedAt is the page's URL for the serving line. Listening on every
// interface (-addr 0.0.0.0:8080, as a class's teacher does), the listener's
// own address (http://[::]:8080) opens nothing: the line gives the
// loopback URL, then the ones other machines use, from the interfaces'
// addresses (at most three; none where they cannot be read).
func servedAt(url string, interfaceAddrs func() ([]net.Addr, error)) string {
	host, port, err := net.SplitHostPort(strings.TrimPrefix(url, "http://"))
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsUnspecified() {
		return url + "/"
	}
	out := "http://" + net.JoinHostPort("127.0.0.1", port) + "/"
	addrs, _ := interfaceAddrs()
	var others []string
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || !ipn.IP.IsGlobalUnicast() || len(others) == 3 {
			continue
		}
		others = append(others, "http://"+net.JoinHostPort(ipn.IP.String(), port)+"/")
	}
	if len(others) > 0 {
		out += " (from other machines: " + strings.Join(others, ", ") + ")"
	}
	return out
}

func describeSQL(cfg app.Config) string {
	switch {
	case cfg.MySQLDSN != "":
		return "MySQL"
	case cfg.SQLitePath != "":
		return "SQLite at " + cfg.SQLitePath
	}
	return "SQLite in memory"
}

// usage lists both ways to call the command: the service's flags, and the
// health probe, which is not a flag of the service and so not in fs.
func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage:\n  %[1]s [flags]             serve the flash-sale lab\n"+
		"  %[1]s -healthcheck [URL]  exit 0 when URL answers 200 (default %[2]s): the container's probe\n\nFlags:\n",
		filepath.Base(fs.Name()), defaultHealthURL)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

const defaultHealthURL = "http://127.0.0.1:8080/healthz"

// healthcheck is the container's health probe: the image is distroless, with
// no curl or wget to ask /healthz, so the server binary asks it itself.
// `seckill -healthcheck [URL]` exits 0 when the URL answers 200.
func healthcheck(ctx context.Context, args []string) error {
	url := defaultHealthURL
	switch len(args) {
	case 0:
	case 1:
		url = args[0]
	default:
		return fmt.Errorf("usage: seckill -healthcheck [URL]")
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: %s answered %s", url, resp.Status)
	}
	return nil
}

// loopback reports whether addr listens on loopback only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
