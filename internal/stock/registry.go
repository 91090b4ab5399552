package stock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// The registries: the streams the consumers read (StreamsKey) and the
// deadline sets the pollers read (DueSetsKey), each a hash of member →
// generation. A member holding work must be enrolled, or the work sits
// where no reader looks; a member drained of work should leave, or the
// readers look at it for ever.
//
// On one Redis the member and the registry are on one server, and a script
// enrols or drops the member in the step that opens or closes it. On a
// Redis Cluster they are in different slots, and no script spans both.
// There each member has a generation, a counter in its own slot
// (generationKey) that every close increments, and the protocol is:
//
//   - a writer finding the member closed reads its generation g, enrols it
//     at g (enrol.lua keeps the highest generation it is told), and opens
//     it only if its generation is still g, in the script that writes to
//     it (async.lua, schedule.lua); else it starts again;
//   - a closer closes the member when it holds no work (close_stream.lua
//     in internal/outbox, close_due.lua), which makes its generation g+1, then drops it from
//     the registry only if it is enrolled at a generation below g+1
//     (unenrol.lua).
//
// So an open member is enrolled: it was opened at generation g after an
// enrolment at g, the registry's generation never goes down, and the only
// drop that could remove it is one of a close at g or before, which needs
// a generation below g. A closer or writer that dies between its steps
// leaves an enrolled member with no work (dropped at the next close), never
// work outside the registry. A stream is open while it exists; a deadline
// set, which Redis deletes when its last deadline goes, while its marker
// (dueOpenKey) does.

var (
	//go:embed enrol.lua
	enrolLua    string
	enrolScript = redis.NewScript(enrolLua)

	//go:embed unenrol.lua
	unenrolLua    string
	unenrolScript = redis.NewScript(unenrolLua)
)

// Enrol enrols member in registry at generation gen (see above).
func Enrol(ctx context.Context, rdb redis.Cmdable, registry, member, gen string) error {
	if err := enrolScript.Run(ctx, rdb, []string{registry}, member, gen).Err(); err != nil {
		return fmt.Errorf("enrolling %s in %s: %w", member, registry, err)
	}
	return nil
}

// Unenrol drops member from registry after a close that made its
// generation gen (see above); it reports whether it dropped it.
func Unenrol(ctx context.Context, rdb redis.Cmdable, registry, member string, gen int64) (bool, error) {
	n, err := unenrolScript.Run(ctx, rdb, []string{registry}, member, gen).Int()
	if err != nil {
		return false, fmt.Errorf("dropping %s from %s: %w", member, registry, err)
	}
	return n == 1, nil
}

// registered lists a registry's members.
func registered(ctx context.Context, rdb redis.Cmdable, registry string) ([]string, error) {
	keys, err := rdb.HKeys(ctx, registry).Result()
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", registry, err)
	}
	return keys, nil
}

// scriptCall is one run of a script among others sent in a pipeline.
type scriptCall struct {
	keys []string
	args []any
}

// runPipelined runs script once per call, pipelined: one round trip per
// node. A pipeline does not fall back from EVALSHA to EVAL on NOSCRIPT as
// Script.Run does, so the calls refused for it (on a server that never ran
// the script: a restart, a new master) are sent again in full, in a second
// pipeline. Each call's reply is at the call's index; a failure is the
// reply's error.
func runPipelined(ctx context.Context, rdb redis.Cmdable, script *redis.Script, calls []scriptCall) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	send := func(which []int, eval bool) {
		// The pipeline's error is the first of its commands': each is read
		// from its own.
		_, _ = rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for _, i := range which {
				if eval {
					cmds[i] = script.Eval(ctx, pipe, calls[i].keys, calls[i].args...)
				} else {
					cmds[i] = script.EvalSha(ctx, pipe, calls[i].keys, calls[i].args...)
				}
			}
			return nil
		})
	}
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	send(all, false)
	var unknown []int
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			unknown = append(unknown, i)
		}
	}
	if len(unknown) > 0 {
		send(unknown, true)
	}
	return cmds
}

// EnrolQueued enrols the streams of l's shards that exist: the reconciler
// calls it for the shards where it found takes still queued after the
// grace. An enrolment lost with a node (a failover that lost the write) or
// left in the old registry would otherwise leave their orders unread for
// ever, since a take enrols a stream only when it finds it closed.
func (qu *Queue) EnrolQueued(ctx context.Context, l Layout, shards []int) error {
	if len(shards) == 0 {
		return nil
	}
	streams := make([]string, 0, len(shards))
	for _, k := range shards {
		streams = append(streams, l.StreamKey(k))
	}
	return qu.EnrolStreams(ctx, streams)
}

// EnrolStreams enrols those of streams that exist at their generation: a
// close racing with it moves the generation on and drops the stream again
// (see the protocol above), or finds it enrolled at a generation below its
// own; either way no order is left outside.
func (qu *Queue) EnrolStreams(ctx context.Context, streams []string) error {
	exists := make([]*redis.IntCmd, len(streams))
	gens := make([]*redis.StringCmd, len(streams))
	_, err := qu.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, st := range streams {
			exists[i] = pipe.Exists(ctx, st)
			gens[i] = pipe.Get(ctx, GenerationKey(st))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("reading %d streams' generations: %w", len(streams), err)
	}
	for i, st := range streams {
		if exists[i].Val() == 0 {
			continue
		}
		gen := gens[i].Val()
		if gen == "" {
			gen = "0"
		}
		if err := Enrol(ctx, qu.rdb, qu.streams, st, gen); err != nil {
			return err
		}
	}
	return nil
}
