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
	var (
		before    *stock.TakenBefore
		unsettled *order.UnsettledError
		forNow    *order.SoldOutForNowError
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
	case errors.As(err, &forNow):
		final := false
		c.Header("Retry-After", strconv.Itoa(int(max(time.Second, forNow.RetryAfter).Round(time.Second).Seconds())))
		c.JSON(status, api.Error{Code: code, Error: msg, Final: &final, Trace: trace})
		return
	case errors.As(err, &early):
		now := early.Now.UTC().Truncate(time.Millisecond)
		c.JSON(status, api.Error{Code: code, Error: msg, StartsAt: &early.StartsAt, Now: &now, Trace: trace})
		return
	}
	if errors.Is(err, admission.ErrOverloaded) {
		c.Header("Retry-After", strconv.Itoa(int(admission.RetryAfter/time.Second)))
	}
	if wait, ok := retryAfter(err); ok {
		c.Header("Retry-After", strconv.Itoa(int(max(time.Second, wait).Round(time.Second).Seconds())))
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

// retryAfter is the wait a refusal names, if it names one.
func retryAfter(err error) (time.Duration, bool) {
	var (
		throttled *session.ThrottledError
		signups   *session.SignupsLimitedError
		address   *admission.AddressLimitedError
	)
	switch {
	case errors.As(err, &address):
		return address.RetryAfter, true
	case errors.As(err, &throttled):
		return throttled.RetryAfter, true
	case errors.As(err, &signups):
		return signups.RetryAfter, true
	}
	return 0, false
}

// classify maps an outcome to its status and code; known is false for a
// failure of something behind the service, whose message stays in the log.
func classify(err error) (status int, code string, known bool) {
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge, api.CodeTooLarge, true
	case errors.Is(err, errBadBody), errors.Is(err, order.ErrInvalid), errors.Is(err, lab.ErrInvalid):
		return http.StatusBadRequest, api.CodeBadRequest, true
	case errors.Is(err, session.ErrNoAccount):
		return http.StatusUnauthorized, api.CodeNoAccount, true
	case errors.Is(err, order.ErrSignIn), errors.Is(err, session.ErrNoToken), errors.Is(err, session.ErrInvalid):
		return http.StatusUnauthorized, api.CodeSignInRequired, true
	case errors.Is(err, session.ErrBadName):
		return http.StatusBadRequest, api.CodeBadRequest, true
	case errors.Is(err, session.ErrPasskeyFailed):
		return http.StatusUnauthorized, api.CodePasskeyFailed, true
	case errors.Is(err, session.ErrChallengeExpired):
		return http.StatusUnauthorized, api.CodeChallengeExpired, true
	case errors.Is(err, session.ErrWeakPassword):
		return http.StatusBadRequest, api.CodeWeakPassword, true
	case errors.Is(err, session.ErrBadCredentials): // judged, even when it also sets a wait
		return http.StatusUnauthorized, api.CodeBadCredentials, true
	case errors.Is(err, session.ErrThrottled), errors.Is(err, session.ErrSignupsLimited):
		return http.StatusTooManyRequests, api.CodeRateLimited, true
	case errors.Is(err, session.ErrNameTaken):
		return http.StatusConflict, api.CodeNameTaken, true
	case errors.Is(err, session.ErrCaptchaRequired):
		return http.StatusForbidden, api.CodeCaptchaRequired, true
	case errors.Is(err, order.ErrAccountTooNew):
		return http.StatusForbidden, api.CodeAccountTooNew, true
	case errors.Is(err, order.ErrLabOnly):
		return http.StatusForbidden, api.CodeLabOnly, true
	case errors.Is(err, admission.ErrPathRequired):
		return http.StatusForbidden, api.CodePathRequired, true
	case errors.Is(err, admission.ErrPathUsed):
		return http.StatusForbidden, api.CodePathUsed, true
	case errors.Is(err, admission.ErrCaptcha):
		return http.StatusForbidden, api.CodeCaptchaFailed, true
	case errors.Is(err, order.ErrRebuilding):
		return http.StatusServiceUnavailable, api.CodeRebuilding, true
	case errors.Is(err, order.ErrUnsettled):
		return http.StatusServiceUnavailable, api.CodeOutcomeUnknown, true
	case errors.Is(err, order.ErrAlreadyPaid):
		return http.StatusConflict, api.CodeAlreadyPaid, true
	case errors.Is(err, order.ErrCancelled):
		return http.StatusConflict, api.CodeOrderCancelled, true
	case errors.Is(err, order.ErrQueued):
		return http.StatusConflict, api.CodeOrderQueued, true
	case errors.Is(err, order.ErrNotStarted):
		return http.StatusConflict, api.CodeNotStarted, true
	case errors.Is(err, order.ErrSaleEnded):
		return http.StatusConflict, api.CodeSaleEnded, true
	case errors.Is(err, catalogue.ErrResetRequired):
		return http.StatusConflict, api.CodeResetRequired, true
	case errors.Is(err, reconcile.ErrBusy):
		return http.StatusConflict, api.CodeBusy, true
	case errors.Is(err, errUnknownHost):
		return http.StatusMisdirectedRequest, api.CodeUnknownHost, true
	case errors.Is(err, catalogue.ErrNotDurable):
		return http.StatusConflict, api.CodeNotDurable, true
	case errors.Is(err, errMediaType):
		return http.StatusUnsupportedMediaType, api.CodeUnsupportedMediaType, true
	case errors.Is(err, errBodyTimeout):
		return http.StatusRequestTimeout, api.CodeTimeout, true
	case errors.Is(err, order.ErrNotFound), errors.Is(err, lab.ErrNotFound):
		return http.StatusNotFound, api.CodeNotFound, true
	case errors.Is(err, stock.ErrSoldOut), errors.Is(err, order.ErrSoldOutForNow):
		return http.StatusConflict, api.CodeSoldOut, true
	case errors.Is(err, stock.ErrAlreadyBought):
		return http.StatusConflict, api.CodeAlreadyBought, true
	case errors.Is(err, lab.ErrBusy):
		return http.StatusConflict, api.CodeRunInProgress, true
	case errors.Is(err, admission.ErrRateLimited):
		return http.StatusTooManyRequests, api.CodeRateLimited, true
	case errors.Is(err, admission.ErrOverloaded):
		return http.StatusServiceUnavailable, api.CodeOverloaded, true
	case errors.Is(err, stock.ErrLockTimeout):
		return http.StatusServiceUnavailable, api.CodeLockTimeout, true
	case errors.Is(err, stock.ErrLeaseLost):
		return http.StatusServiceUnavailable, api.CodeLeaseLost, true
	case errors.Is(err, lock.ErrCrashed):
		return http.StatusServiceUnavailable, api.CodeHolderCrashed, true
	case errors.Is(err, order.ErrClosing), errors.Is(err, lab.ErrClosed), errors.Is(err, order.ErrNoPaths), errors.Is(err, order.ErrCrashed), errors.Is(err, lock.ErrEtcdUnavailable):
		return http.StatusServiceUnavailable, api.CodeUnavailable, true
	case errors.Is(err, lab.ErrNoTarget):
		return http.StatusInternalServerError, api.CodeInternal, true
	}
	return http.StatusServiceUnavailable, api.CodeUnavailable, false
}
