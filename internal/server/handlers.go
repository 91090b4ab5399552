package server

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"seckill/internal/idgen"
	"seckill/internal/lock"
	"seckill/internal/order"
	"seckill/internal/stock"
)

func (s *Server) handleHealth(c *gin.Context) {
	h, err := s.deps.Health(c.Request.Context())
	if err != nil {
		s.deps.Log.Warn("health check failed", "error", err)
		c.JSON(http.StatusServiceUnavailable, gin.H{"status": "unavailable", "error": err.Error()})
		return
	}
	c.JSON(http.StatusOK, h)
}

// handleLocks serves the lock table itself: the page explains a strategy
// with the same text docs/LOCKS.md is generated from.
func (s *Server) handleLocks(c *gin.Context) {
	c.JSON(http.StatusOK, lock.Strategies())
}

type productRequest struct {
	ID       *int64 `json:"id"`
	Name     string `json:"name"`
	Stock    *int   `json:"stock"`
	Shards   int    `json:"shards"`
	Lock     string `json:"lock"`
	Mode     string `json:"mode"`
	Fallback *bool  `json:"fallback"`
	Lab      bool   `json:"lab"`
}

type shardView struct {
	Key   string `json:"key"`
	Stock int    `json:"stock"`
}

type productView struct {
	ID       int64       `json:"id"`
	Name     string      `json:"name"`
	Initial  int         `json:"initial"`
	Stock    int         `json:"stock"`
	Shards   []shardView `json:"shards"`
	Sold     int         `json:"sold"`
	SoldOut  bool        `json:"sold_out"`
	Lock     string      `json:"lock"`
	Mode     string      `json:"mode"`
	Fallback bool        `json:"fallback"`
	Store    string      `json:"store"`
	Lab      bool        `json:"lab"`
	Sale     int64       `json:"sale"`
}

func newProductView(v order.View) productView {
	pv := productView{ID: v.ID, Name: v.Name, Initial: v.Initial, Stock: v.Remaining(), Sold: v.Sold,
		SoldOut: v.SoldOut, Lock: v.Lock, Mode: v.Mode, Fallback: v.Fallback, Store: v.Store, Lab: v.Lab, Sale: v.Sale,
		Shards: make([]shardView, len(v.Levels))}
	layout := stock.Layout{ID: v.ID, Shards: v.Shards, Epoch: v.Epoch}
	for i, n := range v.Levels {
		key := layout.StockKey(i)
		if v.Store == string(stock.InSQL) {
			key = fmt.Sprintf("product_shards(%d,%d)", v.ID, i)
		}
		pv.Shards[i] = shardView{Key: key, Stock: n}
	}
	return pv
}

func (s *Server) handleResetProduct(c *gin.Context) {
	var req productRequest
	if err := decode(c.Request.Body, &req); err != nil {
		s.failErr(c, err)
		return
	}
	if req.ID == nil || req.Stock == nil {
		s.fail(c, http.StatusBadRequest, codeBadRequest, "id and stock are required")
		return
	}
	p, err := s.deps.Orders.Reset(c.Request.Context(), order.ProductSpec{ID: *req.ID, Name: req.Name, Stock: *req.Stock,
		Shards: req.Shards, Lock: req.Lock, Mode: req.Mode, Fallback: req.Fallback, Lab: req.Lab})
	if err != nil {
		s.failErr(c, err)
		return
	}
	s.respondProduct(c, p.ID)
}

func (s *Server) handleProduct(c *gin.Context) {
	id, ok := s.pathID(c, "product")
	if ok {
		s.respondProduct(c, id)
	}
}

func (s *Server) respondProduct(c *gin.Context, id int64) {
	v, _, err := s.deps.Orders.Audit(c.Request.Context(), id)
	if err != nil {
		s.failErr(c, err)
		return
	}
	c.JSON(http.StatusOK, newProductView(v))
}

func (s *Server) handleAudit(c *gin.Context) {
	id, ok := s.pathID(c, "product")
	if !ok {
		return
	}
	_, a, err := s.deps.Orders.Audit(c.Request.Context(), id)
	if err != nil {
		s.failErr(c, err)
		return
	}
	c.JSON(http.StatusOK, newAuditView(a))
}

type orderRequest struct {
	UserID    *int64 `json:"user_id"`
	ProductID *int64 `json:"product_id"`
	Lock      string `json:"lock"`
	Mode      string `json:"mode"`
	HoldMS    int64  `json:"hold_ms"`
	// The lock ladder's faults.
	Abandon           bool  `json:"abandon"`
	CrashBeforeExpire bool  `json:"crash_before_expire"`
	ClockSkewMS       int64 `json:"clock_skew_ms"`
}

// lockWaitHeader carries the time a purchase spent acquiring locks, so that
// a load generator can report lock-wait percentiles without scraping metrics.
const lockWaitHeader = "X-Lock-Wait-Us"

// idempotencyHeader carries the client's key for a purchase: a retry with
// the same key gets the first attempt's outcome instead of buying again.
const idempotencyHeader = "Idempotency-Key"

func (s *Server) handleBuy(c *gin.Context) {
	var req orderRequest
	if err := decode(c.Request.Body, &req); err != nil {
		s.failErr(c, err)
		return
	}
	if req.UserID == nil || req.ProductID == nil {
		s.fail(c, http.StatusBadRequest, codeBadRequest, "user_id and product_id are required")
		return
	}
	// Compare in milliseconds: a huge value would overflow a Duration and
	// wrap into range.
	if req.HoldMS < 0 || req.HoldMS > order.MaxHold.Milliseconds() {
		s.fail(c, http.StatusBadRequest, codeBadRequest, fmt.Sprintf("hold_ms must be between 0 and %d", order.MaxHold.Milliseconds()))
		return
	}
	if limit := order.MaxClockSkew.Milliseconds(); req.ClockSkewMS < -limit || req.ClockSkewMS > limit {
		s.fail(c, http.StatusBadRequest, codeBadRequest, fmt.Sprintf("clock_skew_ms must be within ±%d", limit))
		return
	}
	o, rc, err := s.deps.Orders.Buy(c.Request.Context(), order.Purchase{
		UserID: *req.UserID, ProductID: *req.ProductID, Key: c.GetHeader(idempotencyHeader),
		Lab: order.LabOptions{Lock: req.Lock, Mode: req.Mode,
			Hold: time.Duration(req.HoldMS) * time.Millisecond,
			Fault: order.Fault{Abandon: req.Abandon, Lock: lock.Fault{
				CrashBeforeExpire: req.CrashBeforeExpire,
				ClockSkew:         time.Duration(req.ClockSkewMS) * time.Millisecond,
			}},
		},
	})
	c.Header(lockWaitHeader, strconv.FormatInt(rc.LockWait.Microseconds(), 10))
	s.metrics.purchase(rc, err)
	if err != nil {
		s.failErr(c, err)
		return
	}
	c.JSON(http.StatusCreated, newOrderView(o))
}

func (s *Server) handleOrder(c *gin.Context) {
	id, err := idgen.ParseID(c.Param("id"))
	if err != nil || id <= 0 {
		s.fail(c, http.StatusBadRequest, codeBadRequest, "order id must be a positive integer, sent as a string")
		return
	}
	o, err := s.deps.Orders.Order(c.Request.Context(), id)
	if err != nil {
		s.failErr(c, err)
		return
	}
	c.JSON(http.StatusOK, newOrderView(o))
}

type orderView struct {
	ID        idgen.ID  `json:"id"`
	ProductID int64     `json:"product_id"`
	Sale      int64     `json:"sale"`
	UserID    int64     `json:"user_id"`
	Shard     int       `json:"shard"`
	Lock      string    `json:"lock"`
	Mode      string    `json:"mode"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"created_at"`
}

func newOrderView(o order.Order) orderView {
	return orderView{ID: o.ID, ProductID: o.ProductID, Sale: o.Sale, UserID: o.UserID, Shard: o.Shard,
		Lock: o.Lock, Mode: o.Mode, Status: o.Status, CreatedAt: o.CreatedAt}
}

type auditView struct {
	ProductID   int64                 `json:"product_id"`
	Sale        int64                 `json:"sale"`
	Initial     int                   `json:"initial"`
	Remaining   int                   `json:"remaining"`
	Taken       int                   `json:"taken"`
	Orders      int                   `json:"orders"`
	Oversold    int                   `json:"oversold"`
	LostUpdates int                   `json:"lost_updates"`
	Unsettled   int                   `json:"unsettled"`
	Verdict     string                `json:"verdict"`
	Reconciled  *order.Reconciliation `json:"reconciled,omitempty"`
}

func newAuditView(a order.Audit) auditView {
	return auditView{ProductID: a.ProductID, Sale: a.Sale, Initial: a.Initial, Remaining: a.Remaining, Taken: a.Taken,
		Orders: a.Orders, Oversold: a.Oversold, LostUpdates: a.LostUpdates, Unsettled: a.Unsettled, Verdict: a.Verdict,
		Reconciled: a.Reconciled}
}

func (s *Server) pathID(c *gin.Context, what string) (int64, bool) {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id <= 0 {
		s.fail(c, http.StatusBadRequest, codeBadRequest, what+" id must be a positive integer")
		return 0, false
	}
	return id, true
}
