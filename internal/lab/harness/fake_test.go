package harness

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"seckill/internal/api"
)

// fakeService speaks the order API from memory, so that the engine and the
// verdicts can be tested without Redis or a database. With lock "none" it
// reads the stock, pauses for hold_ms and writes it back minus one, with
// nothing held in between: the race the lab teaches. A buyer is sold one
// unit at most whatever the lock, as the real service's write checks. Every
// other known lock is a mutex per product.
type fakeService struct {
	mu       sync.Mutex
	products map[int64]*fakeProduct
}

type fakeProduct struct {
	lock      sync.Mutex // the "lock" of the safe strategies
	initial   int
	remaining int
	orders    map[int64]bool // by user
}

var fakeLocks = []string{"none", "token"}

func newFakeService(t *testing.T) *httptest.Server {
	t.Helper()
	f := &fakeService{products: make(map[int64]*fakeProduct)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, api.Health{Status: "ok", Mode: "embedded", Redis: "fake", SQL: "fake"})
	})
	mux.HandleFunc("GET /api/locks", func(w http.ResponseWriter, r *http.Request) {
		var ls []api.LockInfo
		for _, l := range fakeLocks {
			ls = append(ls, api.LockInfo{Name: l})
		}
		writeJSON(w, http.StatusOK, ls)
	})
	mux.HandleFunc("POST /api/products", f.reset)
	mux.HandleFunc("POST /api/orders", f.buy)
	mux.HandleFunc("GET /api/products/{id}/audit", f.audit)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, status int, code string) {
	writeJSON(w, status, api.Error{Code: code, Error: strings.ReplaceAll(code, "_", " ")})
}

func (f *fakeService) reset(w http.ResponseWriter, r *http.Request) {
	var p api.ProductRequest
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil || p.ID == nil || p.Stock == nil || !slices.Contains(fakeLocks, p.Lock) {
		fail(w, http.StatusBadRequest, api.CodeBadRequest)
		return
	}
	f.mu.Lock()
	f.products[*p.ID] = &fakeProduct{initial: *p.Stock, remaining: *p.Stock, orders: make(map[int64]bool)}
	f.mu.Unlock()
	writeJSON(w, http.StatusOK, p)
}

func (f *fakeService) product(id int64) *fakeProduct {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.products[id]
}

func (f *fakeService) buy(w http.ResponseWriter, r *http.Request) {
	var in api.OrderRequest
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.UserID == nil || in.ProductID == nil || !slices.Contains(fakeLocks, in.Lock) {
		fail(w, http.StatusBadRequest, api.CodeBadRequest)
		return
	}
	user, product := *in.UserID, *in.ProductID
	p := f.product(product)
	if p == nil {
		fail(w, http.StatusNotFound, api.CodeNotFound)
		return
	}
	w.Header().Set(api.HeaderLockWait, "0")
	if in.Lock != "none" {
		start := time.Now()
		p.lock.Lock()
		defer p.lock.Unlock()
		w.Header().Set(api.HeaderLockWait, strconv.FormatInt(time.Since(start).Microseconds(), 10))
	}
	f.mu.Lock()
	bought, stock := p.orders[user], p.remaining
	f.mu.Unlock()
	switch {
	case bought:
		fail(w, http.StatusConflict, api.CodeAlreadyBought)
		return
	case stock <= 0:
		fail(w, http.StatusConflict, api.CodeSoldOut)
		return
	}
	// The critical section's pause, as the real service's hold_ms.
	time.Sleep(time.Duration(in.HoldMS) * time.Millisecond)
	f.mu.Lock()
	// Checked again in the write, as rmw_write.lua does: under lock "none" a
	// repeat of the buyer can pass the check above during this one's hold,
	// and its second 201 made the harness count more orders than the audit.
	if p.orders[user] {
		f.mu.Unlock()
		fail(w, http.StatusConflict, api.CodeAlreadyBought)
		return
	}
	p.remaining = stock - 1
	p.orders[user] = true
	f.mu.Unlock()
	writeJSON(w, http.StatusCreated, api.Order{ID: "1", UserID: user, ProductID: product})
}

func (f *fakeService) audit(w http.ResponseWriter, r *http.Request) {
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	p := f.product(id)
	if p == nil {
		fail(w, http.StatusNotFound, api.CodeNotFound)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	a := api.Audit{ProductID: id, Initial: p.initial, Remaining: p.remaining, Orders: len(p.orders)}
	a.Oversold = max(0, a.Orders-a.Initial)
	a.LostUpdates = a.Orders - (a.Initial - a.Remaining)
	a.Verdict = api.VerdictOK
	if a.Oversold > 0 {
		a.Verdict = api.VerdictOversold
	} else if a.LostUpdates != 0 {
		a.Verdict = api.VerdictInconsistent
	}
	writeJSON(w, http.StatusOK, a)
}
