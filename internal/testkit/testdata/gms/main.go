// Command gms serves go-mysql-server on a free loopback port, in memory,
// with MySQL's GET_LOCK (see getLock), for the tests of a machine without
// MySQL (see package testkit). It prints the address it listens on, and
// exits when its standard input closes, which it does when the test process
// that started it ends.
//
// It is a module of its own so that the service's module, its go.sum and
// its test binaries do not carry go-mysql-server: compiling its ICU regular
// expressions (WebAssembly) takes 4 seconds at every start of a -race test
// binary that links it, and the lock tests start theirs again and again.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	sqle "github.com/dolthub/go-mysql-server"
	"github.com/dolthub/go-mysql-server/memory"
	"github.com/dolthub/go-mysql-server/server"
	gms "github.com/dolthub/go-mysql-server/sql"
	"github.com/dolthub/go-mysql-server/sql/expression/function"
	"github.com/dolthub/go-mysql-server/sql/types"
	"github.com/sirupsen/logrus"
)

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gms:", err)
		os.Exit(1)
	}
}

func run(stdin io.Reader, stdout io.Writer) error {
	// The server logs every connection at info level, and warns about
	// settings no test uses.
	logrus.SetLevel(logrus.ErrorLevel)
	db := memory.NewDatabase("test")
	db.BaseDatabase.EnablePrimaryKeyIndexes()
	pro := &provider{DbProvider: memory.NewDBProvider(db)}
	engine := sqle.NewDefault(pro)
	pro.locks = engine.LS
	srv, err := server.NewServer(server.Config{Protocol: "tcp", Address: "127.0.0.1:0"},
		engine, gms.NewContext, memory.NewSessionBuilder(pro.DbProvider), nil)
	if err != nil {
		return fmt.Errorf("starting go-mysql-server: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Start() }() // returns when the listener closes
	if _, err := fmt.Fprintln(stdout, srv.Listener.Addr()); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, stdin)
	if err := srv.Close(); err != nil {
		return err
	}
	return <-done
}

// provider is the in-memory databases with MySQL's GET_LOCK in place of
// go-mysql-server's, which the engine asks its provider for first.
type provider struct {
	*memory.DbProvider
	locks *gms.LockSubsystem
}

func (p *provider) Function(ctx *gms.Context, name string) (gms.Function, bool) {
	if !strings.EqualFold(name, "get_lock") {
		return nil, false
	}
	return gms.Function2{Name: "get_lock", Fn: func(name, timeout gms.Expression) gms.Expression {
		return newGetLock(p.locks, name, timeout)
	}}, true
}

// getLock is GET_LOCK as MySQL and MariaDB have it, where go-mysql-server's
// differs in ways the mysql lock depends on: the timeout may be a fraction
// of a second (go-mysql-server rounds it to whole seconds, so a wait of
// 50ms does not wait at all), and KILL QUERY ends a wait at once (in
// go-mysql-server the wait goes on to its timeout, and takes the lock for
// the killed session if it comes free meanwhile, while the client already
// has its error). The locks themselves are
// go-mysql-server's: RELEASE_LOCK, and the release of a session's locks when
// its connection closes, are its own.
type getLock struct {
	*function.GetLock
	locks *gms.LockSubsystem
}

func newGetLock(locks *gms.LockSubsystem, name, timeout gms.Expression) *getLock {
	return &getLock{GetLock: function.CreateNewGetLock(locks)(name, timeout).(*function.GetLock), locks: locks}
}

// poll is how often a waiting GET_LOCK tries again: MySQL wakes a waiter
// when the lock is released, this one within a millisecond.
const poll = time.Millisecond

func (g *getLock) Eval(ctx *gms.Context, row gms.Row) (any, error) {
	name, err := g.LeftChild.Eval(ctx, row)
	if err != nil || name == nil {
		return nil, err
	}
	timeout, err := g.RightChild.Eval(ctx, row)
	if err != nil || timeout == nil {
		return nil, err
	}
	n, _, err := types.LongText.Convert(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("GET_LOCK name %v: %w", name, err)
	}
	secs, _, err := types.Float64.Convert(ctx, timeout)
	if err != nil {
		return nil, fmt.Errorf("GET_LOCK timeout %v: %w", timeout, err)
	}
	deadline := time.Now().Add(time.Duration(secs.(float64) * float64(time.Second)))
	for {
		// Timeout 0: one attempt.
		err := g.locks.Lock(ctx, n.(string), 0)
		if !gms.ErrLockTimeout.Is(err) {
			if err != nil {
				return nil, err
			}
			return int8(1), nil
		}
		if secs.(float64) >= 0 && !time.Now().Before(deadline) { // negative: for ever
			return int8(0), nil
		}
		select {
		case <-ctx.Done(): // KILL QUERY; the client gets the cancellation as the error
			return nil, nil
		case <-time.After(poll):
		}
	}
}

func (g *getLock) WithChildren(children ...gms.Expression) (gms.Expression, error) {
	if len(children) != 2 {
		return nil, gms.ErrInvalidChildrenNumber.New(g, len(children), 2)
	}
	return newGetLock(g.locks, children[0], children[1]), nil
}
