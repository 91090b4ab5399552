package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"seckill/docs"
	"seckill/internal/api"
	"seckill/internal/catalogue"
	"seckill/internal/durability"
	"seckill/internal/idgen"
	"seckill/internal/lock"
	"seckill/internal/order"
	"seckill/internal/reconcile"
	"seckill/internal/stock"
)

func (s *Server) handleHealth(c *gin.Context) {
	h, err := s.health(c.Request.Context())
	if err != nil {
		s.log.Warn("health check failed", "error", err)
		msg := "a backend did not answer"
		for _, down := range []error{ErrRedisDown, ErrDatabaseDown} {
			if errors.Is(err, down) {
				msg = down.Error()
			}
		}
		c.JSON(http.StatusServiceUnavailable, struct {
			Status string `json:"status"`
			api.Error
		}{"unavailable", api.Error{Code: api.CodeUnavailable, Error: msg}})
		return
	}
	c.JSON(http.StatusOK, h)
}

// handleOpenAPI serves the API's description (docs/openapi.yaml) as JSON.
func (s *Server) handleOpenAPI(c *gin.Context) {
	b, err := docs.OpenAPIJSON()
	if err != nil { // the embedded file is checked by internal/api/spec's test
		s.edge.fail(c, http.StatusInternalServerError, api.CodeInternal, "the API's description cannot be read: "+err.Error())
		return
	}
	c.Data(http.StatusOK, "application/json; charset=utf-8", b)
}

func newProductView(v reconcile.View) api.ProductView {
	pv := api.ProductView{ID: v.ID, Name: v.Name, Initial: v.Initial, Stock: v.Remaining(), Sold: v.Sold,
		SoldOut: v.SoldOut, Lock: v.Lock, Mode: v.Mode, Fallback: v.Fallback, Store: v.Store, Lab: v.Lab, Sale: v.Sale,
		PayTimeoutMS: v.PayTimeout.Milliseconds(), Lifecycle: v.Lifecycle, Replicated: v.Replicated,
		Path: v.Path, Captcha: v.Captcha,
		Durability: string(v.Durability.Level), DurabilityReason: v.Durability.Reason,
		StartsAt: v.StartsAt, EndsAt: v.EndsAt, AccountsBefore: v.AccountsBefore, Reservation: v.Reservation,
		Shards: make([]api.ShardView, len(v.Levels))}
	if m, err := order.ModeNamed(v.Mode); err == nil && m.Queued {
		pv.Survives = durability.Survives(v.Durability.Level, v.Replicated)
	}
	layout := stock.Layout{ID: v.ID, Shards: v.Shards, Epoch: v.Epoch}
	for i, n := range v.Levels {
		key := layout.StockKey(i)
		if v.Store == string(stock.InSQL) {
			key = fmt.Sprintf("product_shards(%d,%d)", v.ID, i)
		}
		pv.Shards[i] = api.ShardView{Key: key, Stock: n}
	}
	return pv
}

func (s *shop) handleResetProduct(c *gin.Context) {
	var req api.ProductRequest
	if err := s.e.decode(c, &req); err != nil {
		s.e.failErr(c, err)
		return
	}
	if req.ID == nil || req.Stock == nil {
		s.e.fail(c, http.StatusBadRequest, api.CodeBadRequest, "id and stock are required")
		return
	}
	spec := catalogue.ProductSpec{ID: *req.ID, Name: req.Name, Stock: *req.Stock, Lock: req.Lock, Mode: req.Mode,
		Fallback: req.Fallback, Lab: req.Lab, Lifecycle: req.Lifecycle, Replicated: req.Replicated,
		Path: req.Path, Captcha: req.Captcha, StartsAt: req.StartsAt, EndsAt: req.EndsAt,
		AccountsBefore: req.AccountsBefore, Reservation: req.Reservation, Reset: req.Reset}
	if ms := req.PayTimeoutMS; ms != 0 {
		// In milliseconds first: a huge value would overflow a Duration.
		if ms < catalogue.MinPayTimeout.Milliseconds() || ms > catalogue.MaxPayTimeout.Milliseconds() {
			s.e.fail(c, http.StatusBadRequest, api.CodeBadRequest, fmt.Sprintf("pay_timeout_ms must be 0 (none) or between %d and %d",
				catalogue.MinPayTimeout.Milliseconds(), catalogue.MaxPayTimeout.Milliseconds()))
			return
		}
		spec.PayTimeout = time.Duration(ms) * time.Millisecond
	}
	if req.Shards != nil {
		// order takes 0 for the default; here only an absent field is.
		if n := *req.Shards; n < 1 || n > api.MaxShards {
			s.e.fail(c, http.StatusBadRequest, api.CodeBadRequest, fmt.Sprintf("shards must be between 1 and %d", api.MaxShards))
			return
		}
		spec.Shards = *req.Shards
	}
	p, err := s.newSale(c.Request.Context(), spec)
	if err != nil {
		s.e.failErr(c, err)
		return
	}
	s.respondProduct(c, p.ID)
}

// newSale creates the product, or starts a new sale of it: a lab product's
// on any POST, another product's only on the operator's explicit reset. A
// POST that looks like a create lays no stock out again (issue 36: one
// click on a framed Reset sold a sale's units twice).
func (s *shop) newSale(ctx context.Context, spec catalogue.ProductSpec) (catalogue.Product, error) {
	cat := s.cat
	if spec.Reset || spec.Lab {
		return cat.Reset(ctx, spec)
	}
	p, err := cat.CreateIfAbsent(ctx, spec)
	if errors.Is(err, catalogue.ErrExists) {
		return p, fmt.Errorf("%w: %w; a new sale lays its stock out again: send \"reset\": true to start one", catalogue.ErrResetRequired, err)
	}
	return p, err
}

func (s *shop) handleProduct(c *gin.Context) {
	id, ok := s.e.pathID(c, "product")
	if ok && s.allowProductRead(c, id) {
		s.respondProduct(c, id)
	}
}

func (s *shop) respondProduct(c *gin.Context, id int64) {
	v, _, err := s.audit.Audit(c.Request.Context(), id)
	if err != nil {
		s.e.failErr(c, err)
		return
	}
	pv := newProductView(v)
	pv.Now = s.orders.Now().UTC().Truncate(time.Millisecond)
	if pv.Reservation && s.door != nil {
		// Without the count the view still says the product: a reset
		// that succeeded is not answered as a failure for it.
		if n, err := s.door.Reservations(c.Request.Context(), id); err != nil {
			s.e.log.Warn("the product view leaves out its reservations", "product", id, "error", err)
		} else {
			pv.Reservations = &n
		}
	}
	c.JSON(http.StatusOK, pv)
}

// handleReserve stores the buyer's reservation of the product: 201 the
// first time, 200 with the same reservation after. The buyer is the one
// who may buy it (order.Buyer.MayBuy): signed in, or on a lab product the
// body's user_id.
func (s *shop) handleReserve(c *gin.Context) {
	product, ok := s.e.pathID(c, "product")
	if !ok {
		return
	}
	var req api.ReservationRequest
	if c.Request.ContentLength != 0 {
		if err := s.e.decode(c, &req); err != nil {
			s.e.failErr(c, err)
			return
		}
	}
	b, ok := s.e.buyer(c, req.UserID)
	if !ok {
		return
	}
	ctx := c.Request.Context()
	p, err := s.cat.Product(ctx, product)
	if err == nil {
		err = b.MayBuy(p)
	}
	if err != nil {
		s.e.failErr(c, err)
		return
	}
	if b.ID == 0 {
		s.e.fail(c, http.StatusBadRequest, api.CodeBadRequest, "user_id is required on a lab product (or a signed-in buyer's Authorization: Bearer <token>)")
		return
	}
	if s.door == nil {
		s.e.fail(c, http.StatusServiceUnavailable, api.CodeUnavailable, "this service takes no reservations")
		return
	}
	r, err := s.door.Reserve(ctx, product, b.ID)
	if err != nil {
		s.e.failErr(c, err)
		return
	}
	status := http.StatusOK
	if r.Created {
		status = http.StatusCreated
	}
	c.JSON(status, api.Reservation{ProductID: r.Product, UserID: r.Buyer, ReservedAt: r.At, Reservations: r.Count})
}

func (s *shop) handleAudit(c *gin.Context) {
	id, ok := s.e.pathID(c, "product")
	if !ok || !s.allowProductRead(c, id) {
		return
	}
	_, a, err := s.audit.Audit(c.Request.Context(), id)
	if err != nil {
		s.e.failErr(c, err)
		return
	}
	c.JSON(http.StatusOK, auditBody(a))
}

func (s *shop) handleDrain(c *gin.Context) {
	id, ok := s.e.pathID(c, "product")
	if !ok || !s.allowProductRead(c, id) {
		return
	}
	d, err := s.audit.Drain(c.Request.Context(), id)
	if err != nil {
		s.e.failErr(c, err)
		return
	}
	c.JSON(http.StatusOK, drainBody(d))
}

// handleReconcile runs a pass of the reconciler over the product now.
func (s *shop) handleReconcile(c *gin.Context) {
	id, ok := s.e.pathID(c, "product")
	if !ok {
		return
	}
	r, err := s.audit.Reconcile(c.Request.Context(), id)
	if err != nil {
		s.e.failErr(c, err)
		return
	}
	c.JSON(http.StatusOK, reconciliationBody(&r))
}

func newOrder(o order.Order) api.Order {
	return api.Order{ID: o.ID.String(), ProductID: o.ProductID, Sale: o.Sale, UserID: o.UserID, Shard: o.Shard,
		Lock: o.Lock, Mode: o.Mode, Status: o.Status, Reason: o.Reason, CreatedAt: o.CreatedAt,
		DueAt: o.DueAt, PaidAt: o.PaidAt, CancelledAt: o.CancelledAt, CancelledBy: o.CancelledBy}
}

func (s *shop) handleBuy(c *gin.Context) {
	var trace *stock.Trace
	var req api.OrderRequest
	if err := s.e.decode(c, &req); err != nil {
		s.e.failErr(c, err)
		return
	}
	if msg := checkBuy(req); msg != "" {
		s.e.fail(c, http.StatusBadRequest, api.CodeBadRequest, msg)
		return
	}
	// The answers every buyer would get come first: the herd's refusals
	// cost no token check and no round trip.
	key := c.GetHeader(api.HeaderIdempotencyKey)
	if err := s.door.Refusal(*req.ProductID, key != ""); err != nil {
		s.metrics.purchase(order.Receipt{}, err)
		s.refuse(c, *req.ProductID, err, nil)
		return
	}
	buyer, counted, ok := s.buyerOf(c, *req.ProductID, req.UserID)
	if !ok {
		return
	}
	if req.Trace {
		trace = stock.NewTrace()
	}
	client := c.ClientIP()
	if counted { // in the address's rate already: a purchase counts once
		client = ""
	}
	o, rc, err := s.orders.Buy(c.Request.Context(), order.Purchase{
		UserID: buyer.ID, ProductID: *req.ProductID, Key: key,
		Path: req.PathToken, Client: client,
		Lab: order.LabOptions{Lock: req.Lock, Mode: req.Mode, Faults: faults(req), Trace: trace},
	})
	c.Header(api.HeaderLockWait, strconv.FormatInt(rc.LockWait.Microseconds(), 10))
	s.metrics.purchase(rc, err)
	// Lock none's lease is a no-op: its section runs from read to write.
	t := traceBody(trace, rc.Lock != "none")
	if err != nil {
		s.refuse(c, *req.ProductID, err, t)
		return
	}
	body := newOrder(o)
	body.Trace = t
	if rc.Queued {
		// Accepted, not written: the order is in the queue, and GET
		// /api/orders/:id says pending until its row exists.
		c.Header("Location", "/api/orders/"+o.ID.String())
		c.JSON(http.StatusAccepted, body)
		return
	}
	c.JSON(http.StatusCreated, body)
}

// refuse answers a purchase of product that failed with err.
func (s *shop) refuse(c *gin.Context, product int64, err error, t *api.Trace) {
	if errors.Is(err, stock.ErrSoldOut) && s.cat.SoldOut(product) {
		// For the edge gate: only the flag, which a returning unit
		// clears (and the gate is told), says the whole product is
		// sold out; one empty shard without fallback does not.
		c.Header(api.HeaderSoldOut, strconv.FormatInt(product, 10))
	}
	if err == stock.ErrSoldOut && t == nil {
		c.Data(soldOut.status, "application/json; charset=utf-8", soldOut.body)
		return
	}
	s.e.failTraced(c, err, t)
}

// canned is an answer written as it was encoded once: the herd's sold
// out, the same bytes for every buyer, costs no encoding.
type canned struct {
	status int
	body   []byte
}

// soldOut is failErr's answer to stock.ErrSoldOut itself.
var soldOut = func() canned {
	status, code, _ := classify(stock.ErrSoldOut)
	body, err := json.Marshal(api.Error{Code: code, Error: stock.ErrSoldOut.Error()})
	if err != nil {
		panic(err)
	}
	return canned{status, body}
}()

// checkBuy says what is wrong with a purchase's body, if anything.
func checkBuy(req api.OrderRequest) string {
	if req.ProductID == nil || *req.ProductID <= 0 {
		return "product_id is required: a positive integer"
	}
	// Compare in milliseconds: a huge value would overflow a Duration and
	// wrap into range.
	if req.HoldMS < 0 || req.HoldMS > order.MaxHold.Milliseconds() {
		return fmt.Sprintf("hold_ms must be between 0 and %d", order.MaxHold.Milliseconds())
	}
	if limit := order.MaxClockSkew.Milliseconds(); req.ClockSkewMS < -limit || req.ClockSkewMS > limit {
		return fmt.Sprintf("clock_skew_ms must be within ±%d", limit)
	}
	return ""
}

// faults are the lab's faults a purchase asks for.
func faults(req api.OrderRequest) order.Faults {
	return order.Faults{Hold: time.Duration(req.HoldMS) * time.Millisecond,
		Abandon: req.Abandon, CrashAfterTake: req.CrashAfterTake, Lock: lock.Fault{
			CrashBeforeExpire: req.CrashBeforeExpire,
			ClockSkew:         time.Duration(req.ClockSkewMS) * time.Millisecond,
		}, ReleaseBeforeCommit: req.ReleaseBeforeCommit, Poison: req.Poison}
}

// orderID reads the order id of the path, or answers 400.
func (s *edge) orderID(c *gin.Context) (idgen.ID, bool) {
	raw := c.Param("id")
	id, err := idgen.ParseID(raw)
	if !digits(raw) || err != nil || id <= 0 {
		s.fail(c, http.StatusBadRequest, api.CodeBadRequest, "order id must be a positive integer in decimal digits, sent as a string")
		return 0, false
	}
	return id, true
}

func (s *shop) handleOrder(c *gin.Context) {
	id, ok := s.e.orderID(c)
	if !ok {
		return
	}
	buyer, ok := s.e.buyer(c, nil)
	if !ok {
		return
	}
	o, err := s.reads.OrderFor(c.Request.Context(), id, buyer)
	if err != nil {
		s.e.failErr(c, err)
		return
	}
	c.JSON(http.StatusOK, newOrder(o))
}

// handlePay and handleCancel change an order's state for its buyer.
func (s *shop) handlePay(c *gin.Context)    { s.changeOrder(c, s.pay.Pay) }
func (s *shop) handleCancel(c *gin.Context) { s.changeOrder(c, s.pay.Cancel) }

func (s *shop) changeOrder(c *gin.Context, change func(context.Context, idgen.ID, order.Buyer) (order.Order, error)) {
	id, ok := s.e.orderID(c)
	if !ok {
		return
	}
	var req api.BuyerRequest
	if err := s.e.decodeOptional(c, &req); err != nil {
		s.e.failErr(c, err)
		return
	}
	buyer, ok := s.e.buyer(c, req.UserID)
	if !ok {
		return
	}
	o, err := change(c.Request.Context(), id, buyer)
	if err != nil {
		s.e.failErr(c, err)
		return
	}
	c.JSON(http.StatusOK, newOrder(o))
}

func (s *edge) pathID(c *gin.Context, what string) (int64, bool) {
	raw := c.Param("id")
	id, err := strconv.ParseInt(raw, 10, 64)
	if !digits(raw) || err != nil || id <= 0 {
		s.fail(c, http.StatusBadRequest, api.CodeBadRequest, what+" id must be a positive integer in decimal digits")
		return 0, false
	}
	return id, true
}

// digits reports whether s is plain decimal digits: strconv also takes a
// sign ("+5"), which makes two paths name one resource.
func digits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

// handleLookup tells which of a batch of order ids are rows in the table:
// the harness checks its 202s with it after a Redis crash.
func (s *shop) handleLookup(c *gin.Context) {
	var req api.LookupRequest
	if err := s.e.decode(c, &req); err != nil {
		s.e.failErr(c, err)
		return
	}
	if req.ProductID <= 0 {
		s.e.fail(c, http.StatusBadRequest, api.CodeBadRequest, "product_id must be a positive integer")
		return
	}
	if len(req.IDs) > order.MaxLookup {
		s.e.fail(c, http.StatusBadRequest, api.CodeBadRequest, fmt.Sprintf("ids: at most %d at once", order.MaxLookup))
		return
	}
	ids := make([]idgen.ID, len(req.IDs))
	for i, raw := range req.IDs {
		id, err := idgen.ParseID(raw)
		if err != nil || id <= 0 {
			s.e.fail(c, http.StatusBadRequest, api.CodeBadRequest, fmt.Sprintf("ids[%d]: %q is not an order id (a positive integer)", i, raw))
			return
		}
		ids[i] = id
	}
	if !s.allowProductRead(c, req.ProductID) {
		return
	}
	buyer, ok := s.e.buyer(c, nil)
	if !ok {
		return
	}
	found, err := s.reads.Written(c.Request.Context(), req.ProductID, buyer, ids)
	if err != nil {
		s.e.failErr(c, err)
		return
	}
	there := make(map[idgen.ID]bool, len(found))
	for _, id := range found {
		there[id] = true
	}
	out := api.Lookup{Found: []string{}, Missing: []string{}}
	for _, id := range ids {
		if there[id] {
			out.Found = append(out.Found, id.String())
		} else {
			out.Missing = append(out.Missing, id.String())
		}
	}
	c.JSON(http.StatusOK, out)
}
