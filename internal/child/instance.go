package child

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"seckill/internal/app"
)

// ServeFlag is the hidden first argument that makes a binary one service
// instance: the service's flags follow it.
const ServeFlag = "-serve"

// listening starts the line a child prints once it is ready.
const listening = "listening "

// Instance is a service instance running as a child process.
type Instance struct {
	*Process
	URL string
}

// StartInstance starts exe (a binary that calls Run) as a service instance
// with the service's flags args, and returns once it listens. It exits when
// its stdin closes, so none outlives its parent even if that is killed.
func StartInstance(ctx context.Context, exe string, args []string, stderr io.Writer) (*Instance, error) {
	p, url, err := start(ctx, exe, append([]string{ServeFlag}, args...), stderr, listening, nil)
	if err != nil {
		return nil, fmt.Errorf("starting a service instance: %w", err)
	}
	return &Instance{Process: p, URL: url}, nil
}

// serve is the instance's side: it prints its URL, then serves until its
// stdin closes (the parent is gone) or it is signalled.
func serve(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	cfg, fs, err := app.ParseConfig("service instance", args, getenv)
	if err != nil {
		fs.SetOutput(stderr)
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := app.Start(ctx, cfg, log, app.Extras{})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, listening+srv.URL)
	select {
	case <-ctx.Done():
	case <-awaitParent(stdin):
	case <-srv.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	return srv.Shutdown(sctx)
}
