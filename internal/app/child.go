package app

import (
	"context"
	"io"
	"log/slog"
	"time"
)

// Running is a started service instance: the same interface as
// testkit/child's Service, which is an alias of it, so that StartChild is
// child's StartService without the service's binary linking child.
type Running = interface {
	Done() <-chan struct{}
	Shutdown(context.Context) error
}

// StartChild starts a service instance in a child process (see child.Run
// and child.Main): the service's flags args, its log at warn on stderr. It
// is child.StartService for loadtest's binary and the tests that start
// instances; it lives here, not in testenv, as loadtest's binary may not
// link the testing package, and not in child, which does not import the
// service (the service's own packages test with child's processes).
func StartChild(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) (Running, string, time.Duration, error) {
	// An instance keeps no operator token in the user's configuration
	// directory: it is a test's or a run's, gone when they end (its args
	// may still name a -data-dir).
	args = append([]string{"-data-dir="}, args...)
	cfg, fs, err := ParseConfig("service instance", args, getenv)
	if err != nil {
		fs.SetOutput(stderr)
		return nil, "", 0, err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := Start(ctx, cfg, log, Extras{})
	if err != nil {
		return nil, "", 0, err
	}
	return srv, srv.URL, cfg.ShutdownTimeout, nil
}
