package order

import (
	"net/http"

	"seckill/internal/api"
)

// Statuses are how the server answers this package's sentinel errors,
// first match first (ErrNotFound and ErrInvalid are catalogue's too).
var Statuses = []api.ErrorStatus{
	{Err: ErrInvalid, Status: http.StatusBadRequest, Code: api.CodeBadRequest},
	{Err: ErrSignIn, Status: http.StatusUnauthorized, Code: api.CodeSignInRequired},
	{Err: ErrAccountTooNew, Status: http.StatusForbidden, Code: api.CodeAccountTooNew},
	{Err: ErrNotReserved, Status: http.StatusForbidden, Code: api.CodeNotReserved},
	{Err: ErrReservationClosed, Status: http.StatusConflict, Code: api.CodeReservationClosed},
	{Err: ErrNoReservation, Status: http.StatusConflict, Code: api.CodeNoReservation},
	{Err: ErrLabOnly, Status: http.StatusForbidden, Code: api.CodeLabOnly},
	{Err: ErrRebuilding, Status: http.StatusServiceUnavailable, Code: api.CodeRebuilding},
	{Err: ErrUnsettled, Status: http.StatusServiceUnavailable, Code: api.CodeOutcomeUnknown},
	{Err: ErrAlreadyPaid, Status: http.StatusConflict, Code: api.CodeAlreadyPaid},
	{Err: ErrCancelled, Status: http.StatusConflict, Code: api.CodeOrderCancelled},
	{Err: ErrQueued, Status: http.StatusConflict, Code: api.CodeOrderQueued},
	{Err: ErrNotStarted, Status: http.StatusConflict, Code: api.CodeNotStarted},
	{Err: ErrSaleEnded, Status: http.StatusConflict, Code: api.CodeSaleEnded},
	{Err: ErrNotFound, Status: http.StatusNotFound, Code: api.CodeNotFound},
	{Err: ErrSoldOutForNow, Status: http.StatusConflict, Code: api.CodeSoldOut},
	{Err: ErrClosing, Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable},
	{Err: ErrNoPaths, Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable},
	{Err: ErrCrashed, Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable},
}
