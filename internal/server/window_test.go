package server_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"seckill/internal/api"
)

// TestSaleWindow: a purchase before starts_at is 409 not_started with the
// opening and the service's clock, one at or after ends_at 409
// sale_ended, one inside sells; the product view shows the window and the
// service's clock, and leaves out a bound that is not set.
func TestSaleWindow(t *testing.T) {
	e := startDefault(t)
	now := time.Now().UTC()
	rfc := func(t time.Time) string { return t.Format(time.RFC3339Nano) }
	opens := now.Add(time.Hour).Truncate(time.Millisecond)
	early := e.reset(product{"stock": 5, "shards": 1, "lab": false, "starts_at": rfc(opens)})
	ended := e.reset(product{"stock": 5, "shards": 1, "lab": false,
		"starts_at": rfc(now.Add(-time.Hour)), "ends_at": rfc(now.Add(-time.Minute))})
	open := e.reset(product{"stock": 5, "shards": 1, "lab": false,
		"starts_at": rfc(now.Add(-time.Minute)), "ends_at": rfc(now.Add(time.Hour))})

	buyer := e.as("window-" + t.Name())
	var refused api.Error
	before := time.Now()
	st := buyer.do("POST", "/api/orders", map[string]any{"product_id": early}, &refused)
	after := time.Now()
	if st != http.StatusConflict || refused.Code != api.CodeNotStarted {
		t.Fatalf("before the opening: %d %+v, want 409 not_started", st, refused)
	}
	if refused.StartsAt == nil || !refused.StartsAt.Equal(opens) {
		t.Errorf("not_started's starts_at %v, want %v", refused.StartsAt, opens)
	}
	if n := refused.Now; n == nil || n.Before(before.Truncate(time.Millisecond)) || n.After(after) {
		t.Errorf("not_started's now %v, want the service's clock between %v and %v", n, before, after)
	}
	refused = api.Error{}
	if st := buyer.do("POST", "/api/orders", map[string]any{"product_id": ended}, &refused); st != http.StatusConflict || refused.Code != api.CodeSaleEnded {
		t.Errorf("after the end: %d %+v, want 409 sale_ended", st, refused)
	}
	if refused.StartsAt != nil || refused.Now != nil {
		t.Errorf("sale_ended carries %+v: starts_at and now are not_started's", refused)
	}
	if st := buyer.do("POST", "/api/orders", map[string]any{"product_id": open}, nil); st != http.StatusCreated {
		t.Errorf("inside the window: %d, want 201", st)
	}

	var raw map[string]any
	var view api.ProductView
	e.do("GET", fmt.Sprintf("/api/products/%d", early), nil, &raw)
	before = time.Now()
	e.do("GET", fmt.Sprintf("/api/products/%d", early), nil, &view)
	if view.StartsAt == nil || !view.StartsAt.Equal(opens) || view.Now.Before(before.Add(-time.Millisecond)) || view.Now.Truncate(time.Millisecond) != view.Now {
		t.Errorf("the view: starts_at %v, now %v; want %v and the service's clock in milliseconds", view.StartsAt, view.Now, opens)
	}
	if _, ok := raw["ends_at"]; ok {
		t.Errorf("the view shows ends_at %v for a product without one", raw["ends_at"])
	}
}

// TestBadSaleWindows: a window the service cannot honour is 400 with a
// message, never a 500.
func TestBadSaleWindows(t *testing.T) {
	e := startDefault(t)
	for name, tc := range map[string]struct{ window, says string }{
		"ends at the start":  {`"starts_at":"2030-01-01T10:00:00Z","ends_at":"2030-01-01T10:00:00Z"`, "must be after starts_at"},
		"ends before starts": {`"starts_at":"2030-01-01T10:00:00Z","ends_at":"2030-01-01T09:00:00+00:00"`, "must be after starts_at"},
		"not RFC 3339":       {`"starts_at":"tomorrow"`, "RFC 3339"},
		"a number":           {`"ends_at":1700000000`, "RFC 3339"},
		"year 1":             {`"starts_at":"0001-01-01T00:00:00Z"`, "between"},
		"past year 9999":     {`"ends_at":"9999-12-31T23:00:00-05:00"`, "between"},
	} {
		var refused api.Error
		body := fmt.Sprintf(`{"id":%d,"stock":5,%s}`, 4_000_000_000+time.Now().UnixNano()%1_000_000, tc.window)
		if st := e.do("POST", "/api/products", body, &refused); st != http.StatusBadRequest || !strings.Contains(refused.Error, tc.says) {
			t.Errorf("%s: %d %+v, want 400 saying %q", name, st, refused, tc.says)
		}
	}
}
