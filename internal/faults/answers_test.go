package faults_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"seckill/internal/api"
	"seckill/internal/app"
	"seckill/internal/stock"
	"seckill/internal/testenv"
)

// lostReplies is a client hook that lets the async take's script run and
// then loses its reply, as a connection cut after the command was sent
// would.
type lostReplies struct {
	armed atomic.Bool
	lost  atomic.Int32
}

func (h *lostReplies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lostReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *lostReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil || !h.armed.Load() || !asyncTake(cmd) {
			return err
		}
		h.lost.Add(1)
		cmd.SetErr(io.ErrUnexpectedEOF)
		return io.ErrUnexpectedEOF
	}
}

// asyncTake tells async.lua's run by its argument the consumers' group,
// which no other script is given.
func asyncTake(cmd redis.Cmder) bool {
	if n := cmd.Name(); n != "evalsha" && n != "eval" {
		return false
	}
	for _, a := range cmd.Args() {
		if a == stock.Group {
			return true
		}
	}
	return false
}

// An async take whose reply is lost, and its retry's too, answers 503
// outcome_unknown naming the order that will settle: the id is drawn
// before the take, and it is the row the consumer writes.
func TestAsyncUnknownOutcomeNamesTheOrder(t *testing.T) {
	srv := testenv.Start(t, config(t, "", ""), app.Extras{})
	s := newSale(t, srv)
	s.reset(3, "token", "async")
	lose := new(lostReplies)
	srv.Redis().AddHook(lose)
	lose.armed.Store(true)
	o := s.buy(7, "lost-7")
	lose.armed.Store(false)
	if o.status != http.StatusServiceUnavailable || o.code != api.CodeOutcomeUnknown {
		t.Fatalf("a take whose replies were lost (%d of them): %v; want 503 %s", lose.lost.Load(), o, api.CodeOutcomeUnknown)
	}
	if o.order == "" || o.order == "0" {
		t.Fatalf("%v: want the id of the order that will settle", o)
	}
	var ord api.Order
	waitFor(t, "order "+o.order+" written", func() bool {
		resp, err := s.client.Get(s.urls[0] + "/api/orders/" + o.order)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&ord) != nil {
			return false
		}
		return ord.Status != "pending"
	})
	if ord.ID != o.order || ord.UserID != 7 || ord.Status != "unpaid" {
		t.Errorf("the row: %+v; want order %s of buyer 7, unpaid", ord, o.order)
	}
	s.waitDrained()
	s.checkPromise(nil)
}
