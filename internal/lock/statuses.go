package lock

import (
	"net/http"

	"seckill/internal/api"
)

// Statuses are how the server answers this package's sentinel errors,
// first match first.
var Statuses = []api.ErrorStatus{
	{Err: ErrCrashed, Status: http.StatusServiceUnavailable, Code: api.CodeHolderCrashed},
	{Err: ErrEtcdUnavailable, Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable},
}
