package catalogue

import (
	"net/http"

	"seckill/internal/api"
)

// Statuses are how the server answers this package's sentinel errors,
// first match first (ErrInvalid and ErrNotFound are in order's table).
var Statuses = []api.ErrorStatus{
	{Err: ErrResetRequired, Status: http.StatusConflict, Code: api.CodeResetRequired},
	{Err: ErrNotDurable, Status: http.StatusConflict, Code: api.CodeNotDurable},
}
