package admission

import (
	"net/http"

	"seckill/internal/api"
)

// Statuses are how the server answers this package's sentinel errors,
// first match first.
var Statuses = []api.ErrorStatus{
	{Err: ErrPathRequired, Status: http.StatusForbidden, Code: api.CodePathRequired},
	{Err: ErrPathUsed, Status: http.StatusForbidden, Code: api.CodePathUsed},
	{Err: ErrCaptcha, Status: http.StatusForbidden, Code: api.CodeCaptchaFailed},
	{Err: ErrRateLimited, Status: http.StatusTooManyRequests, Code: api.CodeRateLimited},
	{Err: ErrOverloaded, Status: http.StatusServiceUnavailable, Code: api.CodeOverloaded},
}
