package reconcile

import (
	"net/http"

	"seckill/internal/api"
)

// Statuses are how the server answers this package's sentinel errors.
var Statuses = []api.ErrorStatus{
	{Err: ErrBusy, Status: http.StatusConflict, Code: api.CodeBusy},
}
