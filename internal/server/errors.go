package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/gin-gonic/gin"

	"seckill/internal/idgen"
	"seckill/internal/lock"
	"seckill/internal/order"
	"seckill/internal/stock"
)

// Error codes, one per outcome a client may branch on (docs/API.md).
const (
	codeBadRequest    = "bad_request"
	codeUnauthorized  = "unauthorized"
	codeNotFound      = "not_found"
	codeSoldOut       = "sold_out"
	codeAlreadyBought = "already_bought"
	codeTooLarge      = "too_large"
	codeRateLimited   = "rate_limited"
	codeLockTimeout   = "lock_timeout"
	codeLeaseLost     = "lease_lost"
	codeCrashed       = "holder_crashed"
	codeUnavailable   = "unavailable"
	codeLabOnly       = "lab_only"
	codeRebuilding    = "rebuilding"
	codeUnknown       = "outcome_unknown"
)

type errorBody struct {
	Code  string `json:"code"`
	Error string `json:"error"`
	// OrderID names the order an error is about: the buyer's earlier order
	// (already_bought), or one whose outcome is unknown.
	OrderID *idgen.ID `json:"order_id,omitempty"`
}

func (s *Server) fail(c *gin.Context, status int, code, msg string) {
	c.JSON(status, errorBody{Code: code, Error: msg})
}

// failErr is the one place where an error becomes a status.
func (s *Server) failErr(c *gin.Context, err error) {
	status, code := classify(err)
	msg := err.Error()
	var (
		before    *stock.TakenBefore
		unsettled *order.UnsettledError
	)
	switch {
	case errors.As(err, &before):
		c.JSON(status, errorBody{Code: code, Error: msg, OrderID: &before.Prior.Order})
		return
	case errors.As(err, &unsettled):
		s.deps.Log.Error("a purchase's outcome is unknown; the reconciler will settle it", "order", unsettled.Order, "error", err)
		c.JSON(status, errorBody{Code: code, OrderID: &unsettled.Order,
			Error: "the order may or may not have been written: retry with the same Idempotency-Key, or read the order later"})
		return
	}
	if status == http.StatusServiceUnavailable && code == codeUnavailable && !errors.Is(err, order.ErrClosing) {
		// The cause (an address, a driver message) is for the log, not the client.
		s.deps.Log.Error("request failed", "route", c.FullPath(), "error", err)
		msg = "a backend (Redis or the database) did not answer; nothing was sold, try again"
	}
	s.fail(c, status, code, msg)
}

func classify(err error) (int, string) {
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge, codeTooLarge
	case errors.Is(err, order.ErrInvalid):
		return http.StatusBadRequest, codeBadRequest
	case errors.Is(err, order.ErrLabOnly):
		return http.StatusForbidden, codeLabOnly
	case errors.Is(err, order.ErrRebuilding):
		return http.StatusServiceUnavailable, codeRebuilding
	case errors.Is(err, order.ErrUnsettled):
		return http.StatusServiceUnavailable, codeUnknown
	case errors.Is(err, order.ErrNotFound):
		return http.StatusNotFound, codeNotFound
	case errors.Is(err, stock.ErrSoldOut):
		return http.StatusConflict, codeSoldOut
	case errors.Is(err, stock.ErrAlreadyBought):
		return http.StatusConflict, codeAlreadyBought
	case errors.Is(err, order.ErrRateLimited):
		return http.StatusTooManyRequests, codeRateLimited
	case errors.Is(err, stock.ErrLockTimeout):
		return http.StatusServiceUnavailable, codeLockTimeout
	case errors.Is(err, stock.ErrLeaseLost):
		return http.StatusServiceUnavailable, codeLeaseLost
	case errors.Is(err, lock.ErrCrashed):
		return http.StatusServiceUnavailable, codeCrashed
	}
	return http.StatusServiceUnavailable, codeUnavailable
}

// decode reads one JSON object into v, refusing unknown fields (a typo such
// as "hold" for "hold_ms" would otherwise pass unnoticed) and trailing data.
func decode(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("unexpected data after the JSON object")
	}
	var (
		syntax   *json.SyntaxError
		typ      *json.UnmarshalTypeError
		tooLarge *http.MaxBytesError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &tooLarge):
		return fmt.Errorf("body larger than %d bytes: %w", maxBody, err)
	case errors.Is(err, io.EOF):
		err = errors.New("empty body; want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		err = errors.New("malformed JSON: the body ends inside the object")
	case errors.As(err, &syntax):
		err = fmt.Errorf("malformed JSON at byte %d: %v", syntax.Offset, syntax)
	case errors.As(err, &typ):
		err = fmt.Errorf("field %q must be %s, not %s", typ.Field, jsonKind(typ.Type.Kind().String()), typ.Value)
	}
	return fmt.Errorf("%w: %w", order.ErrInvalid, err)
}

func jsonKind(goKind string) string {
	switch goKind {
	case "int", "int64", "int32":
		return "an integer"
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	}
	return "of another type"
}
