// Package durability tells what a Redis keeps of a write it answered when
// its process dies: the promise an answer that rests on Redis alone (the
// async mode's 202, whose order is only in a stream) can make. It reads
// the persistence settings of the Redis, or of every master of a cluster,
// and classifies them; docs/INVARIANT.md says how each class is used.
package durability

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Level is what a Redis keeps of an answered write.
type Level string

// The levels, weakest first.
const (
	// None: a restart may come back without it. No append-only file:
	// nothing, or, with RDB snapshots only (save), what the last snapshot
	// held, minutes old, and never the writes since.
	None Level = "none"
	// Everysec: an append-only file fsynced about once a second (or when
	// the kernel likes, appendfsync no): a killed process loses no
	// answered write (it is in the kernel's cache); a machine that goes
	// down loses the last second or so.
	Everysec Level = "everysec"
	// Always: an append-only file fsynced before each write is answered.
	Always Level = "always"
)

func (l Level) rank() int {
	switch l {
	case Always:
		return 2
	case Everysec:
		return 1
	}
	return 0
}

// Reading is a Redis's durability and the setting that decided it.
type Reading struct {
	Level Level
	// Reason names the setting, and the master on a cluster: "appendonly
	// is no", "127.0.0.1:7001: appendfsync is always".
	Reason string
	At     time.Time
}

// Classify maps a server's CONFIG values to a Reading: appendonly,
// appendfsync and save as CONFIG GET tells them.
func Classify(appendonly, appendfsync, save string) Reading {
	if appendonly != "yes" {
		r := Reading{Level: None, Reason: "appendonly is " + appendonly + ": a restart comes back empty"}
		if strings.TrimSpace(save) != "" {
			r.Reason = fmt.Sprintf("appendonly is %s and save is %q: a restart comes back with the last RDB snapshot, without the writes since", appendonly, save)
		}
		return r
	}
	switch appendfsync {
	case "always":
		return Reading{Level: Always, Reason: "appendonly is yes, appendfsync is always"}
	case "everysec":
		return Reading{Level: Everysec, Reason: "appendonly is yes, appendfsync is everysec"}
	}
	return Reading{Level: Everysec, Reason: "appendonly is yes, appendfsync is " + appendfsync +
		": a killed Redis loses no answered write; a machine that goes down loses what the kernel had not flushed"}
}

// Read reads the durability of the Redis c is connected to, or of every
// master of a cluster, the weakest deciding: one round trip per server. A
// server that refuses CONFIG (renamed or forbidden, as on managed Redis)
// is asked INFO persistence, which tells whether an append-only file is on
// but not its fsync policy (taken as Everysec); one that tells neither (the
// embedded miniredis) is taken as None, with the reason: KeepsNothing when
// it knows no CONFIG at all. An error means the server did not answer.
func Read(ctx context.Context, c redis.UniversalClient) (Reading, error) {
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		r, err := readOne(ctx, c)
		r.At = time.Now()
		return r, err
	}
	var (
		mu      sync.Mutex
		weakest *Reading
	)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		r, err := readOne(ctx, n)
		if err != nil {
			return err
		}
		r.Reason = n.Options().Addr + ": " + r.Reason
		mu.Lock()
		defer mu.Unlock()
		if weakest == nil || r.Level.rank() < weakest.Level.rank() {
			weakest = &r
		}
		return nil
	})
	if err != nil {
		return Reading{}, err
	}
	if weakest == nil {
		return Reading{}, errors.New("durability: the cluster named no master")
	}
	weakest.At = time.Now()
	return *weakest, nil
}

func readOne(ctx context.Context, c redis.Cmdable) (Reading, error) {
	var aof, fsync, save *redis.MapStringStringCmd
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		// One parameter each: Redis before 7 takes one per CONFIG GET.
		aof, fsync, save = p.ConfigGet(ctx, "appendonly"), p.ConfigGet(ctx, "appendfsync"), p.ConfigGet(ctx, "save")
		return nil
	})
	var refused redis.Error
	switch {
	case err == nil && aof.Val()["appendonly"] != "":
		return Classify(aof.Val()["appendonly"], fsync.Val()["appendfsync"], save.Val()["save"]), nil
	case err != nil && !errors.As(err, &refused):
		return Reading{}, fmt.Errorf("reading Redis's persistence settings: %w", err)
	}
	configErr := "CONFIG GET answered no appendonly"
	if err != nil {
		configErr = "CONFIG GET: " + err.Error()
	}
	info, err := c.Info(ctx, "persistence").Result()
	if err != nil && !errors.As(err, &refused) {
		return Reading{}, fmt.Errorf("reading Redis's persistence: %w", err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		switch strings.TrimSpace(line) {
		case "aof_enabled:1":
			return Reading{Level: Everysec, Reason: "INFO persistence says aof_enabled:1 (" + configErr +
				"; the fsync policy is unknown, taken as everysec)"}, nil
		case "aof_enabled:0":
			return Reading{Level: None, Reason: "INFO persistence says aof_enabled:0, appendonly is no (" + configErr + ")"}, nil
		}
	}
	if unknownCommand(configErr) {
		return Reading{Level: None, Reason: KeepsNothing}, nil
	}
	why := configErr
	if err != nil {
		why += "; INFO persistence: " + err.Error()
	}
	return Reading{Level: None, Reason: "the persistence settings could not be read (" + why +
		"): a Redis that may keep nothing is taken as keeping nothing"}, nil
}

// KeepsNothing is the reason given for a Redis that knows no CONFIG and
// says nothing of persistence in INFO: the embedded miniredis, which keeps
// everything in memory. Said plainly: the raw refusal ("ERR unknown
// command 'config'") read as a fault at every start and in every product's
// view, when it is what the lab on one machine is (issue 41, finding 5).
// A real Redis with CONFIG renamed still tells its append-only file in
// INFO persistence, and is read from there.
const KeepsNothing = "an embedded Redis keeps nothing on disk: a restart comes back empty"

// unknownCommand reports a CONFIG refusal that means the server has no such
// command, not that it forbids it (NOPERM) or failed.
func unknownCommand(configErr string) bool {
	return strings.Contains(strings.ToLower(configErr), "unknown command")
}

// Watch keeps a Redis's durability, read again when it may have changed:
// after maxAge (CONFIG SET changes it without a reconnection), and after
// Stale (a new connection: the server may have restarted with other
// settings, or a replica been promoted). It reads only when asked, so an
// idle process sends nothing.
type Watch struct {
	c      redis.UniversalClient
	maxAge time.Duration
	weaker func(before, now Reading)

	// stale is apart from mu: Stale is called from the client's
	// connection hook, also on the connection a reading under mu opens.
	stale atomic.Bool
	mu    sync.Mutex
	last  Reading
}

// DefaultMaxAge is how long a Watch trusts a reading: the product view
// reads it, so at most one CONFIG GET per this per process and master.
const DefaultMaxAge = 10 * time.Second

// NewWatch watches the Redis c is connected to; maxAge 0 is DefaultMaxAge.
// weaker, if not nil, is told each reading weaker than the one before it.
func NewWatch(c redis.UniversalClient, maxAge time.Duration, weaker func(before, now Reading)) *Watch {
	if maxAge <= 0 {
		maxAge = DefaultMaxAge
	}
	w := &Watch{c: c, maxAge: maxAge, weaker: weaker}
	w.stale.Store(true)
	return w
}

// Get returns the durability, read again if the last reading is older
// than maxAge, or stale.
func (w *Watch) Get(ctx context.Context) (Reading, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stale.Load() && time.Since(w.last.At) < w.maxAge {
		return w.last, nil
	}
	return w.read(ctx)
}

// Fresh reads the durability now.
func (w *Watch) Fresh(ctx context.Context) (Reading, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.read(ctx)
}

func (w *Watch) read(ctx context.Context) (Reading, error) {
	w.stale.Store(false)
	r, err := Read(ctx, w.c)
	if err != nil {
		w.stale.Store(true)
		return Reading{}, err
	}
	if w.weaker != nil && !w.last.At.IsZero() && r.Level.rank() < w.last.Level.rank() {
		w.weaker(w.last, r)
	}
	w.last = r
	return r, nil
}

// Stale makes the next Get read again.
func (w *Watch) Stale() { w.stale.Store(true) }

// Survives says in words what a 202 survives when the order, or its take,
// rests on a Redis that keeps l: an instance crash always (the take is in
// Redis before the 202), a restart of Redis as l says, and the loss of a
// master only when replicated (a replica has the take before the 202).
func Survives(l Level, replicated bool) string {
	restart := "not a restart of its Redis (no append-only file: Redis comes back empty, or from an old snapshot)"
	switch l {
	case Everysec:
		restart = "a restart of its Redis process, but not all of a restart of its machine, which loses the last second (an append-only file fsynced every second)"
	case Always:
		restart = "a restart of its Redis or of its machine (an append-only file fsynced before each answer)"
	}
	master := "not the loss of its Redis master: no replica has the take when the 202 is told, so a failover, or a stale master taking back over, loses it"
	if replicated {
		master = "the loss of its Redis master (a failover, a stale master taking back over): a replica has the take before the 202 is told"
	}
	return "an instance crash (the take is in Redis before the 202); " + restart + "; " + master
}
