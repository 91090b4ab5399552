package server_test

import (
	"net/http"
	"testing"

	"seckill/internal/api"
)

// TestTraceOverHTTP: a purchase asked with "trace": true answers with its
// critical section, on the 201 and on the refusal alike; lock none's section
// has no acquire or release; the lua mode's is one atomic step; on a product
// that is not a lab product the trace is refused like the other lab options.
func TestTraceOverHTTP(t *testing.T) {
	e := startDefault(t)
	id := e.reset(product{"stock": 1, "shards": 1, "lock": "token", "mode": "rmw"})

	var o api.Order
	if code := e.do(http.MethodPost, "/api/orders", map[string]any{"user_id": 1, "product_id": id, "trace": true}, &o); code != http.StatusCreated {
		t.Fatalf("purchase: %d", code)
	}
	if o.Trace == nil || len(o.Trace.Sections) != 1 {
		t.Fatalf("the 201's trace: %+v, want one section", o.Trace)
	}
	s := o.Trace.Sections[0]
	if s.Outcome != api.OutcomeTaken || s.AcquireUS == nil || s.ReleaseUS == nil || s.ReadUS == nil || s.WriteUS == nil || s.Read == nil || *s.Read != 1 ||
		s.Wrote == nil || *s.Wrote != 0 || *s.AcquireUS > *s.ReadUS || *s.ReadUS > *s.WriteUS || *s.WriteUS > *s.ReleaseUS ||
		*s.ReleaseUS > o.Trace.TookUS || o.Trace.ReceivedUnixUS == 0 {
		t.Errorf("the token lock's section %+v of %+v: want acquire ≤ read 1 ≤ write 0 ≤ release ≤ took", s, o.Trace)
	}

	var ae api.Error
	if code := e.do(http.MethodPost, "/api/orders", map[string]any{"user_id": 2, "product_id": id, "lock": "none", "trace": true}, &ae); code != http.StatusConflict {
		t.Fatalf("purchase of an empty shard: %d %+v", code, ae)
	}
	if ae.Trace == nil || len(ae.Trace.Sections) != 1 || ae.Trace.Sections[0].Outcome != api.OutcomeEmpty ||
		ae.Trace.Sections[0].AcquireUS != nil || ae.Trace.Sections[0].ReleaseUS != nil || ae.Trace.Sections[0].Read == nil || *ae.Trace.Sections[0].Read != 0 {
		t.Errorf("the sold-out answer's trace under lock none: %+v, want one empty section, read 0, no acquire or release", ae.Trace)
	}

	lua := e.reset(product{"stock": 1, "shards": 1, "mode": "lua"})
	o = api.Order{}
	e.do(http.MethodPost, "/api/orders", map[string]any{"user_id": 1, "product_id": lua, "trace": true}, &o)
	if o.Trace == nil || len(o.Trace.Sections) != 1 || o.Trace.Sections[0].WriteUS == nil || o.Trace.Sections[0].DoneUS == nil ||
		o.Trace.Sections[0].ReadUS != nil || o.Trace.Sections[0].Outcome != api.OutcomeTaken {
		t.Errorf("the lua take's trace: %+v, want one atomic step", o.Trace)
	}

	plain := e.reset(product{"stock": 1, "lab": false})
	ae = api.Error{}
	if code := e.as("trace").do(http.MethodPost, "/api/orders", map[string]any{"product_id": plain, "trace": true}, &ae); code != http.StatusForbidden || ae.Code != api.CodeLabOnly {
		t.Errorf("a trace on a product that is not a lab product: %d %+v, want 403 lab_only", code, ae)
	}
}
