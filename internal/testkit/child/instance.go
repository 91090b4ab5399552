package child

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
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

// Service is a started service instance, as the service's *app.Server is.
// It is an alias of the interface itself, not a type of its own, so that
// app.StartChild can be a StartService without importing this package
// (which would link test support into the service's binary).
type Service = interface {
	Done() <-chan struct{}
	Shutdown(context.Context) error
}

// StartService starts the service from its flags args for a ServeFlag
// child: it returns the running service, the URL it serves and how long its
// shutdown may take. child does not import the service, whose own packages
// test with child's processes (the lock's tests pause MySQL with Freeze):
// the binary that starts instances passes it to Run.
type StartService func(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) (svc Service, url string, shutdown time.Duration, err error)

// serve is the instance's side: it prints its URL, then serves until its
// stdin closes (the parent is gone) or it is signalled.
func serve(ctx context.Context, start StartService, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if start == nil {
		return errors.New(ServeFlag + ": this binary starts no service instance")
	}
	srv, url, shutdown, err := start(ctx, args, getenv, stderr)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, listening+url)
	select {
	case <-ctx.Done():
	case <-awaitParent(stdin):
	case <-srv.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdown)
	defer cancel()
	return srv.Shutdown(sctx)
}

// KillHolding kills the instance (SIGKILL) at a moment when its consumer
// holds queued orders delivered to it and not acknowledged: it pauses the
// process, reads what each consumer holds through delivered, and kills it
// if its consumer holds any, else resumes it and looks again a few
// milliseconds later, until ctx ends. It returns the dead consumer's name
// and how many orders it held. A consumer's name carries its process id between dashes
// (see outbox.UniqueName), which is how it is found.
func (in *Instance) KillHolding(ctx context.Context, delivered func(context.Context) (map[string]int64, error)) (string, int64, error) {
	tag := fmt.Sprintf("-%d-", in.Pid())
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var held map[string]int64
	for {
		if err := in.Pause(); err != nil {
			return "", 0, err
		}
		// Its own deadline: a read cut by ctx's end would hide what was held.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		var err error
		held, err = delivered(dctx)
		cancel()
		if err != nil {
			_ = in.Resume()
			return "", 0, err
		}
		for name, n := range held {
			if n > 0 && strings.Contains(name, tag) {
				in.Kill()
				return name, n, nil
			}
		}
		if err := in.Resume(); err != nil {
			return "", 0, err
		}
		select {
		case <-ctx.Done():
			return "", 0, fmt.Errorf("instance %d's consumer held no order before the deadline (the consumers held %v): %w", in.Pid(), held, ctx.Err())
		case <-tick.C:
		}
	}
}
