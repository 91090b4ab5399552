package stock

import (
	"net/http"

	"seckill/internal/api"
)

// Statuses are how the server answers this package's sentinel errors,
// first match first.
var Statuses = []api.ErrorStatus{
	{Err: ErrSoldOut, Status: http.StatusConflict, Code: api.CodeSoldOut},
	{Err: ErrAlreadyBought, Status: http.StatusConflict, Code: api.CodeAlreadyBought},
	{Err: ErrLockTimeout, Status: http.StatusServiceUnavailable, Code: api.CodeLockTimeout},
	{Err: ErrLeaseLost, Status: http.StatusServiceUnavailable, Code: api.CodeLeaseLost},
}
