package session

import (
	"net/http"

	"seckill/internal/api"
)

// Statuses are how the server answers this package's sentinel errors,
// first match first: a refused password is judged even when it also sets
// a wait (ErrBadCredentials before ErrThrottled).
var Statuses = []api.ErrorStatus{
	{Err: ErrNoAccount, Status: http.StatusUnauthorized, Code: api.CodeNoAccount},
	{Err: ErrNoToken, Status: http.StatusUnauthorized, Code: api.CodeSignInRequired},
	{Err: ErrInvalid, Status: http.StatusUnauthorized, Code: api.CodeSignInRequired},
	{Err: ErrBadName, Status: http.StatusBadRequest, Code: api.CodeBadRequest},
	{Err: ErrPasskeyFailed, Status: http.StatusUnauthorized, Code: api.CodePasskeyFailed},
	{Err: ErrChallengeExpired, Status: http.StatusUnauthorized, Code: api.CodeChallengeExpired},
	{Err: ErrWeakPassword, Status: http.StatusBadRequest, Code: api.CodeWeakPassword},
	{Err: ErrBadCredentials, Status: http.StatusUnauthorized, Code: api.CodeBadCredentials},
	{Err: ErrThrottled, Status: http.StatusTooManyRequests, Code: api.CodeRateLimited},
	{Err: ErrSignupsLimited, Status: http.StatusTooManyRequests, Code: api.CodeRateLimited},
	{Err: ErrNameTaken, Status: http.StatusConflict, Code: api.CodeNameTaken},
	{Err: ErrCaptchaRequired, Status: http.StatusForbidden, Code: api.CodeCaptchaRequired},
}
