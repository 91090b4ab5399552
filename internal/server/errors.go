package server

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"seckill/internal/admission"
	"seckill/internal/api"
	"seckill/internal/catalogue"
	"seckill/internal/lab"
	"seckill/internal/lock"
	"seckill/internal/order"
	"seckill/internal/reconcile"
	"seckill/internal/session"
	"seckill/internal/stock"
)

func (s *edge) fail(c *gin.Context, status int, code, msg string) {
	c.JSON(status, api.Error{Code: code, Error: msg})
}

// failErr is the one place where an error becomes a status.
func (s *edge) failErr(c *gin.Context, err error) { s.failTraced(c, err, nil) }

// failTraced is failErr for a purchase that carries its trace.
func (s *edge) failTraced(c *gin.Context, err error, trace *api.Trace) {
	status, code, known := classify(err)
	msg := err.Error()
	if wait, ok := retryIn(err); ok {
		c.Header("Retry-After", strconv.Itoa(int(max(time.Second, wait).Round(time.Second).Seconds())))
	} else if errors.Is(err, admission.ErrOverloaded) {
		c.Header("Retry-After", strconv.Itoa(int(admission.RetryAfter/time.Second)))
	}
	var (
		before    *stock.TakenBefore
		unsettled *order.UnsettledError
		early     *order.NotStartedError
	)
	switch {
	case errors.As(err, &before):
		c.JSON(status, api.Error{Code: code, Error: msg, OrderID: before.Prior.Order.String(), Trace: trace})
		return
	case errors.As(err, &unsettled):
		s.log.Error("a purchase's outcome is unknown; the reconciler will settle it", "order", unsettled.Order, "error", err)
		c.JSON(status, api.Error{Code: code, OrderID: unsettled.Order.String(), Trace: trace,
			Error: "the order may or may not have been written: retry with the same Idempotency-Key, or read the order later"})
		return
	case errors.Is(err, order.ErrSoldOutForNow):
		final := false
		c.JSON(status, api.Error{Code: code, Error: msg, Final: &final, Trace: trace})
		return
	case errors.As(err, &early):
		now := early.Now.UTC().Truncate(time.Millisecond)
		c.JSON(status, api.Error{Code: code, Error: msg, StartsAt: &early.StartsAt, Now: &now, Trace: trace})
		return
	}
	if !known {
		// The cause (an address, a driver message) is for the log, not the client.
		s.log.Error("request failed", "route", c.FullPath(), "error", err)
		msg = "a backend (Redis or the database) did not answer; nothing was sold, try again"
	}
	if status == http.StatusRequestTimeout {
		c.Header("Connection", "close") // the rest of the body may still come
	}
	c.JSON(status, api.Error{Code: code, Error: msg, Trace: trace})
}

// retryIn is the wait a refusal names, if it names one: an error that
// says when to try again has a method RetryIn, whatever its package.
func retryIn(err error) (time.Duration, bool) {
	var w interface{ RetryIn() time.Duration }
	if errors.As(err, &w) {
		return w.RetryIn(), true
	}
	return 0, false
}

// classify maps an outcome to its status and code; known is false for a
// failure of something behind the service, whose message stays in the log.
// The server's own errors come first, then each package's table in
// statuses' order, the first row that matches answering.
func classify(err error) (status int, code string, known bool) {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return http.StatusRequestEntityTooLarge, api.CodeTooLarge, true
	}
	for _, table := range statuses {
		for _, row := range table {
			if errors.Is(err, row.Err) {
				return row.Status, row.Code, true
			}
		}
	}
	return http.StatusServiceUnavailable, api.CodeUnavailable, false
}

// statuses are the tables classify reads, in order: the edge's own errors
// (a body or a host refused), then the domain packages'.
var statuses = [][]api.ErrorStatus{
	{
		{Err: errBadBody, Status: http.StatusBadRequest, Code: api.CodeBadRequest},
		{Err: errUnknownHost, Status: http.StatusMisdirectedRequest, Code: api.CodeUnknownHost},
		{Err: errMediaType, Status: http.StatusUnsupportedMediaType, Code: api.CodeUnsupportedMediaType},
		{Err: errBodyTimeout, Status: http.StatusRequestTimeout, Code: api.CodeTimeout},
	},
	order.Statuses, lab.Statuses, session.Statuses, admission.Statuses, catalogue.Statuses, reconcile.Statuses,
	stock.Statuses, lock.Statuses,
}
