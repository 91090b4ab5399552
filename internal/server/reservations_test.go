package server_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"seckill/internal/api"
	"seckill/internal/order"
)

// TestReservationsOverHTTP: until starts_at a signed-in buyer reserves a
// product that asks for it (201, then 200 with the same reservation), the
// product view counts them, and from starts_at reserving is closed and only
// those who reserved buy, in the opening's first second and after it.
func TestReservationsOverHTTP(t *testing.T) {
	e := startDefault(t)
	kim, _ := e.signUp(uniqueName("kim"), password)
	lee, _ := e.signUp(uniqueName("lee"), password)
	ann, _ := e.signUp(uniqueName("ann"), password)
	var ae api.Error
	if st := e.do("POST", "/api/products", product{"id": 1, "stock": 2, "lab": false, "reservation": true}, &ae); st != http.StatusBadRequest {
		t.Fatalf("reservations without starts_at: %d %+v, want 400", st, ae)
	}
	opens := time.Now().Add(4 * time.Second).UTC()
	id := e.reset(product{"stock": 2, "shards": 1, "lab": false, "starts_at": opens, "reservation": true})
	plain := e.reset(product{"stock": 2, "shards": 1, "lab": false})
	path := func(id int64) string { return fmt.Sprintf("/api/products/%d/reservation", id) }

	var first, again api.Reservation
	if st := kim.do("POST", path(id), nil, &first); st != http.StatusCreated || first.Reservations != 1 || first.ProductID != id {
		t.Fatalf("kim reserves: %d %+v, want 201 with 1 reservation", st, first)
	}
	if st := kim.do("POST", path(id), nil, &again); st != http.StatusOK || !again.ReservedAt.Equal(first.ReservedAt) || again.Reservations != 1 {
		t.Fatalf("kim again: %d %+v, want 200 with the first reservation (%s)", st, again, first.ReservedAt)
	}
	if st := lee.do("POST", path(id), nil, nil); st != http.StatusCreated {
		t.Fatalf("lee reserves: %d, want 201", st)
	}
	ae = api.Error{}
	if st := e.do("POST", path(id), map[string]any{"user_id": 5}, &ae); st != http.StatusBadRequest {
		t.Errorf("a user_id in the body on a product that is not a lab product: %d %+v, want 400", st, ae)
	}
	ae = api.Error{}
	if st := kim.do("POST", path(plain), nil, &ae); st != http.StatusConflict || ae.Code != api.CodeNoReservation {
		t.Errorf("a product without reservations: %d %+v, want 409 %s", st, ae, api.CodeNoReservation)
	}
	var pv api.ProductView
	if st := e.do("GET", fmt.Sprintf("/api/products/%d", id), nil, &pv); st != http.StatusOK || !pv.Reservation || pv.Reservations == nil || *pv.Reservations != 2 {
		t.Fatalf("the product view: %d reservation %v, reservations %v; want 2", st, pv.Reservation, pv.Reservations)
	}

	time.Sleep(time.Until(opens))
	ae = api.Error{}
	if st := ann.do("POST", path(id), nil, &ae); st != http.StatusConflict || ae.Code != api.CodeReservationClosed {
		t.Errorf("ann reserves at the opening: %d %+v, want 409 %s", st, ae, api.CodeReservationClosed)
	}
	ae = api.Error{}
	if st := ann.do("POST", "/api/orders", map[string]any{"product_id": id}, &ae); st != http.StatusForbidden || ae.Code != api.CodeNotReserved {
		t.Errorf("ann, who did not reserve, buys: %d %+v, want 403 %s", st, ae, api.CodeNotReserved)
	}
	if st := kim.do("POST", "/api/orders", map[string]any{"product_id": id}, nil); st != http.StatusCreated {
		t.Errorf("kim, who reserved, buys in the opening second: %d, want 201", st)
	}
	time.Sleep(time.Until(opens.Add(order.ClockSkew)))
	ae = api.Error{}
	if st := ann.do("POST", "/api/orders", map[string]any{"product_id": id}, &ae); st != http.StatusForbidden || ae.Code != api.CodeNotReserved {
		t.Errorf("ann buys after the opening second: %d %+v, want 403 %s", st, ae, api.CodeNotReserved)
	}
	if st := lee.do("POST", "/api/orders", map[string]any{"product_id": id}, nil); st != http.StatusCreated {
		t.Errorf("lee, who reserved, buys after the opening second: %d, want 201", st)
	}
	if a := e.audit(id); a.Orders != 2 || a.Remaining != 0 || a.Verdict != api.VerdictOK {
		t.Errorf("audit %+v: want the two who reserved sold the two units", a)
	}
}
