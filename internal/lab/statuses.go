package lab

import (
	"net/http"

	"seckill/internal/api"
)

// Statuses are how the server answers this package's sentinel errors,
// first match first.
var Statuses = []api.ErrorStatus{
	{Err: ErrInvalid, Status: http.StatusBadRequest, Code: api.CodeBadRequest},
	{Err: ErrNotFound, Status: http.StatusNotFound, Code: api.CodeNotFound},
	{Err: ErrBusy, Status: http.StatusConflict, Code: api.CodeRunInProgress},
	{Err: ErrClassFull, Status: http.StatusConflict, Code: api.CodeClassFull},
	{Err: ErrClosed, Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable},
	{Err: ErrNoTarget, Status: http.StatusInternalServerError, Code: api.CodeInternal},
}
