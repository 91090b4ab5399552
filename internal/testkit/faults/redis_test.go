package faults_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/api"
	"seckill/internal/app"
	"seckill/internal/idgen"
	"seckill/internal/stock"
)

// A Redis paused mid-burst (the whole process, SIGSTOP, for 3s): commands
// time out after 2s and are sent once more, and some had run before their
// answers froze, so a take may run twice. It is idempotent: the second run
// finds the first one's record and the purchase completes. No unit is lost,
// nobody is told already_bought without an order, and the audit is exact
// once the reconciler has settled any purchase whose outcome stayed unknown.
func TestRedisPausedMidBurst(t *testing.T) {
	t.Parallel() // mostly waiting out a pause: beside the others
	for _, tc := range []struct{ lock, mode string }{{"none", "lua"}, {"token", "rmw"}} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			r := ownRedis(t)
			s := newSale(t, start(t, config(t, r.Addr, ""), app.Extras{}))
			s.reset(100, tc.lock, tc.mode)
			b := s.startBurst(200, 30)
			b.waitAnswered(t, 20)
			if err := r.PauseFor(t.Context(), 3*time.Second); err != nil {
				t.Fatal(err)
			}
			if n := b.answered.Load(); n == 200 {
				t.Fatal("the burst ended during the pause: nothing was in flight across it")
			}
			outs := b.wait(t)
			s.reconcile()
			s.checkPromise(outs)
		})
	}
}

// Redis restarted empty mid-sale (killed, and a new server on its port):
// purchases are told the stock is being rebuilt, never "sold out"; the
// rebuild lays the stock out again from the orders, buyers included, so the
// audit is exact and nobody buys twice.
func TestRedisRestartedEmptyMidSale(t *testing.T) {
	r := ownRedis(t)
	s := newSale(t, start(t, config(t, r.Addr, ""), app.Extras{}))
	s.reset(500, "none", "lua") // more than the buyers: "sold out" is never true
	b := s.startBurst(300, 30)
	b.waitAnswered(t, 60)
	if err := r.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	outs := b.wait(t)
	if n := counts(outs)["409 "+api.CodeSoldOut]; n > 0 {
		t.Errorf("%d buyers told sold out with stock left", n)
	}

	// Once more with nothing else running: purchases one at a time until one
	// is sold. The first to find the stock gone is told so and starts the
	// rebuild; those before it may meet the client's connections to the
	// server that died: 503 unavailable, or, for a take written to such a
	// connection (the take is the purchase's first command, its order id
	// drawn in memory), 503 outcome_unknown with the order id, which the
	// reconciler settles and checkPromise holds to the promise. A buyer
	// whose account this test could not mark is tried again: their
	// purchase was not sent (go-redis answers a dial with the last dial's
	// error, for up to a second after a burst of failed dials, while it
	// tries again in the background).
	if err := r.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	var told []outcome
	waitFor(t, "a sale after the rebuild", func() bool {
		o := s.buy(int64(len(told)+1), "after-the-loss")
		if o.unsent {
			return false
		}
		told = append(told, o)
		return o.status == http.StatusCreated
	})
	rebuilding := 0
	for _, o := range told {
		switch {
		case o.code == api.CodeRebuilding:
			rebuilding++
		case o.code == api.CodeOutcomeUnknown && o.order == "":
			t.Errorf("a purchase after Redis lost the stock: %v, an unknown outcome without its order id", o)
		case o.status != http.StatusCreated && o.code != api.CodeUnavailable && o.code != api.CodeOutcomeUnknown:
			t.Errorf("a purchase after Redis lost the stock: %v, want 503 %s until the rebuild", o, api.CodeRebuilding)
		}
	}
	if rebuilding == 0 {
		t.Errorf("purchases after Redis lost the stock: %v; want one told %s", told, api.CodeRebuilding)
	}
	s.reconcile()
	s.checkPromise(append(outs, told...))

	// Nobody buys twice: every buyer who was sold a unit before either
	// loss is told so now, with that order.
	for _, o := range outs {
		if o.status != http.StatusCreated {
			continue
		}
		if again := s.buy(o.user, "twice"); again.code != api.CodeAlreadyBought || again.order != o.order {
			t.Errorf("%v; buying again after the rebuild: %v, want already bought with that order", o, again)
		}
	}
	s.checkPromise(nil)
}

// A Redis that is down is said so at once: 503 unavailable, without
// dialling again and again. The client used to try 5 dials 100ms apart for
// each of 4 attempts of a command, about 2s in all, before the purchase
// gave up; the bound below (1s) is far above a refused dial's few
// milliseconds and below those retries' back-offs alone (1.6s), so it tells
// the two apart without timing anything tightly.
func TestRedisDownAnswersQuickly(t *testing.T) {
	r := ownRedis(t)
	s := newSale(t, start(t, config(t, r.Addr, ""), app.Extras{}))
	s.reset(10, "none", "lua")
	if o := s.buy(1, ""); o.status != http.StatusCreated {
		t.Fatalf("a purchase before Redis went down: %v", o)
	}
	s.accounts(2) // its mark written while Redis answers
	r.Kill()
	start := time.Now()
	o := s.buy(2, "")
	took := time.Since(start)
	t.Logf("a purchase with Redis down was answered in %s: %v", took, o)
	// The take is the purchase's first Redis command (its order id comes
	// from a block held in memory). The client's second try fails to dial,
	// but its first may have been written to a connection Redis died
	// holding: the client cannot tell, so the take's outcome is unknown,
	// and the answer names the order the reconciler will settle. Either
	// answer says at once that nothing is known to be sold.
	switch {
	case o.status != http.StatusServiceUnavailable:
		t.Errorf("a purchase with Redis down: %v, want 503", o)
	case o.code == api.CodeOutcomeUnknown && o.order == "":
		t.Errorf("a purchase with Redis down: %v, want the order its outcome is unknown of", o)
	case o.code != api.CodeUnavailable && o.code != api.CodeOutcomeUnknown:
		t.Errorf("a purchase with Redis down: %v, want 503 %s or %s", o, api.CodeUnavailable, api.CodeOutcomeUnknown)
	}
	if took > time.Second {
		t.Errorf("answered after %s: the client dialled again and again", took)
	}
}

// unreachableMarks is a client hook that refuses, while on, to send the
// commands that write unsettled marks, as a client whose connections to a
// paused Redis are gone and whose new ones cannot be set up: the takes
// sent on the connections it held before the pause run once Redis resumes,
// and the marks written after never reach it. Issue 37 saw every mark of a
// 10 s pause lost so; in a test, which connections a command finds is
// luck, which the hook takes out.
type unreachableMarks struct {
	on      atomic.Bool
	refused atomic.Int32
}

// heldTakes is how many takes holdTakes holds for the pause.
const heldTakes = 5

// takeHold is a hook on the service's Redis client that, once armed,
// holds the next n takes of a product (the lua take's EVALSHA, keyed by a
// shard's stock and ledger) until released.
type takeHold struct {
	takes    map[string]string // a shard's stock key: its ledger key
	n        int
	armed    atomic.Int32
	arrived  chan struct{}
	released chan struct{}
}

func holdTakes(l stock.Layout, n int) *takeHold {
	h := &takeHold{takes: map[string]string{}, n: n, arrived: make(chan struct{}, n), released: make(chan struct{})}
	for shard := range l.Shards {
		h.takes[l.StockKey(shard)] = l.LedgerKey(shard)
	}
	return h
}

// arm holds the next n takes and returns once they are held.
func (h *takeHold) arm(t *testing.T) {
	t.Helper()
	t.Cleanup(h.release) // never a purchase held past its test
	h.armed.Store(int32(h.n))
	for range h.n {
		select {
		case <-h.arrived:
		case <-time.After(patience):
			t.Fatalf("%d takes to hold: not within %s", h.n, patience)
		}
	}
}

// release lets the held takes go on, once.
func (h *takeHold) release() {
	select {
	case <-h.released:
	default:
		close(h.released)
	}
}

func (h *takeHold) isTake(cmd redis.Cmder) bool {
	args := cmd.Args()
	if name := cmd.Name(); (name != "evalsha" && name != "eval") || len(args) < 5 {
		return false
	}
	stockKey, _ := args[3].(string)
	ledger, ok := h.takes[stockKey]
	return ok && args[4] == ledger
}

func (h *takeHold) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *takeHold) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.isTake(cmd) && h.armed.Add(-1) >= 0 {
			h.arrived <- struct{}{}
			<-h.released
		}
		return next(ctx, cmd)
	}
}

func (h *takeHold) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

var errUnreachable = errors.New("dial tcp: i/o timeout (the test's hook: Redis is paused)")

func (h *unreachableMarks) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *unreachableMarks) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.refuse(cmd) {
			cmd.SetErr(errUnreachable)
			return errUnreachable
		}
		return next(ctx, cmd)
	}
}

func (h *unreachableMarks) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if h.refuse(cmd) {
				for _, c := range cmds {
					c.SetErr(errUnreachable)
				}
				return errUnreachable
			}
		}
		return next(ctx, cmds)
	}
}

// refuse tells a mark's SADD while the hook is on.
func (h *unreachableMarks) refuse(cmd redis.Cmder) bool {
	args := cmd.Args()
	if !h.on.Load() || cmd.Name() != "sadd" || len(args) < 2 {
		return false
	}
	if k, ok := args[1].(string); !ok || !strings.HasPrefix(k, "seckill:unsettled:") {
		return false
	}
	h.refused.Add(1)
	return true
}

// A Redis paused 10 s mid-burst (the whole process, SIGSTOP), lua mode, a
// product that is not a lab product (issue 37): the purchases in flight
// are answered outcome_unknown and their unsettled marks cannot reach the
// paused Redis, while some of their takes, held in its buffers, run once
// it resumes: units out of the store with no order. The process holds the
// marks it could not write and writes them once Redis answers, so that no
// buyer is told a final sold out while such a take stands, and one pass of
// the reconciler, with a grace of an hour, returns every one of them.
func TestRedisPausedSoldOutNotFinal(t *testing.T) {
	t.Parallel() // mostly waiting out a pause: beside the others
	r := ownRedis(t)
	cfg := config(t, r.Addr, "")
	cfg.ReconcileGrace = time.Hour // only the takes marked unsettled may skip it
	srv := start(t, cfg, app.Extras{})
	s := newSale(t, srv)
	// Stock enough that the pause strikes with units left, whatever the
	// speed of the purchases before it, and buyers enough to sell out
	// after it.
	s.reset(400, "none", "lua")
	st := s.read()
	cut := new(unreachableMarks)
	held := holdTakes(stock.Layout{ID: s.product, Shards: st.p.Shards, Epoch: st.p.Epoch}, heldTakes)
	srv.Redis().AddHook(cut)
	srv.Redis().AddHook(held)
	b := s.startBurst(1500, 40)
	b.waitAnswered(t, 50)
	// Which stage each purchase is at when the process stops is chance; the
	// takes held here are sent after it stopped, so that some surely wait
	// in its socket buffers, as a take does that was sent just before.
	held.arm(t)
	cut.on.Store(true)
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	held.release()
	time.Sleep(10 * time.Second)
	err := r.Resume()
	cut.on.Store(false)
	if err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	outs := b.wait(t)

	st = s.read()
	var stranded []idgen.ID // takes that stand without their order
	for _, e := range st.ledger {
		if _, ok := st.orders[e.Order]; !ok {
			stranded = append(stranded, e.Order)
		}
	}
	t.Logf("clients told %v; %d takes without their order; %d marks refused during the pause", counts(outs), len(stranded), cut.refused.Load())
	if cut.refused.Load() == 0 || len(stranded) == 0 {
		t.Fatal("no mark was refused, or no take of an unknown outcome ran in the resumed Redis: the test shows nothing")
	}
	var final []outcome
	for _, o := range outs {
		if o.final && o.sent.After(resumed) {
			final = append(final, o)
		}
	}
	if len(final) > 0 {
		t.Errorf("%d buyers who came after the resume were told a final sold out while %d takes stood without their order (first: %v)",
			len(final), len(stranded), final[0])
	}
	l := stock.Layout{ID: s.product, Shards: st.p.Shards, Epoch: st.p.Epoch}
	marked, err := stock.NewStore(s.rdb, s.db).Ledgers().Unsettled(t.Context(), l)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range stranded {
		if !marked[id] {
			t.Errorf("order %s: its take stands without its order and is not marked unsettled in Redis", id)
		}
	}
	s.reconcile() // with an hour's grace: only the marked takes are settled
	s.checkPromise(outs)
}
