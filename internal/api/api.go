// Package api is the HTTP contract shared by the server, the lab, the
// harness and loadtest: the request and response bodies, the error codes,
// the header names, and the names and defaults of modes and locks.
// docs/API.md documents it. It imports only the standard library, so that a
// client such as the harness speaks the contract without the service's
// dependencies.
package api

import "time"

// Error is the body of every error answer.
type Error struct {
	Code  string `json:"code"`
	Error string `json:"error"`
	// OrderID names the order an error is about: the buyer's order
	// (already_bought), or one whose outcome is unknown (outcome_unknown).
	OrderID string `json:"order_id,omitempty"`
	// Final is false on a sold_out that may not last: units of purchases
	// whose outcome is unknown may come back (ask again after Retry-After).
	Final *bool `json:"final,omitempty"`
	// Trace is the refused purchase's trace, when it asked for one.
	Trace *Trace `json:"trace,omitempty"`
	// StartsAt and Now come with not_started: when the sale opens, and the
	// service's clock when it refused, so that a client counts down on it.
	StartsAt *time.Time `json:"starts_at,omitempty"`
	Now      *time.Time `json:"now,omitempty"`
}

// Error codes, one per outcome a client may branch on.
const (
	CodeBadRequest           = "bad_request"            // 400, and 405
	CodeUnauthorized         = "unauthorized"           // 401
	CodeSignInRequired       = "sign_in_required"       // 401
	CodeNoAccount            = "no_account"             // 401
	CodeBadCredentials       = "bad_credentials"        // 401
	CodePasskeyFailed        = "passkey_failed"         // 401
	CodeChallengeExpired     = "challenge_expired"      // 401
	CodeWeakPassword         = "weak_password"          // 400
	CodeCaptchaRequired      = "captcha_required"       // 403
	CodeAccountTooNew        = "account_too_new"        // 403
	CodeNotReserved          = "not_reserved"           // 403
	CodeNameTaken            = "name_taken"             // 409
	CodeForbiddenOrigin      = "forbidden_origin"       // 403
	CodeLabOnly              = "lab_only"               // 403
	CodePathRequired         = "path_required"          // 403
	CodePathUsed             = "path_used"              // 403
	CodeCaptchaFailed        = "captcha_failed"         // 403
	CodeNotFound             = "not_found"              // 404
	CodeTimeout              = "timeout"                // 408
	CodeSoldOut              = "sold_out"               // 409
	CodeAlreadyBought        = "already_bought"         // 409
	CodeRunInProgress        = "run_in_progress"        // 409
	CodeClassFull            = "class_full"             // 409
	CodeAlreadyPaid          = "already_paid"           // 409
	CodeOrderCancelled       = "order_cancelled"        // 409
	CodeOrderQueued          = "order_queued"           // 409
	CodeBusy                 = "busy"                   // 409
	CodeNotDurable           = "not_durable"            // 409
	CodeResetRequired        = "reset_required"         // 409
	CodeNotStarted           = "not_started"            // 409
	CodeSaleEnded            = "sale_ended"             // 409
	CodeReservationClosed    = "reservation_closed"     // 409
	CodeNoReservation        = "no_reservation"         // 409
	CodeTooLarge             = "too_large"              // 413
	CodeUnsupportedMediaType = "unsupported_media_type" // 415
	CodeUnknownHost          = "unknown_host"           // 421
	CodeRateLimited          = "rate_limited"           // 429
	CodeInternal             = "internal"               // 500
	CodeLockTimeout          = "lock_timeout"           // 503
	CodeLeaseLost            = "lease_lost"             // 503
	CodeHolderCrashed        = "holder_crashed"         // 503
	CodeUnavailable          = "unavailable"            // 503
	CodeRebuilding           = "rebuilding"             // 503
	CodeOutcomeUnknown       = "outcome_unknown"        // 503
	CodeOverloaded           = "overloaded"             // 503
)

// MediaType is the Content-Type of the bodies, both ways; a request body
// sent with another is refused (parameters such as charset aside).
const MediaType = "application/json"

// HeaderLockWait carries the microseconds a purchase spent acquiring locks,
// so that a load generator reports lock-wait percentiles without scraping
// metrics.
const HeaderLockWait = "X-Lock-Wait-Us"

// HeaderIdempotencyKey carries a client's key for a purchase: a retry with
// the same key gets the first attempt's outcome instead of buying again.
// 1–64 characters among A–Z a–z 0–9 . _ : -.
const HeaderIdempotencyKey = "Idempotency-Key"

// Stock modes.
const (
	// ModeRMW is GET, check, an optional hold, then SET, inside the lock.
	ModeRMW = "rmw"
	// ModeLua is one atomic script; it takes no lock.
	ModeLua = "lua"
	// ModeDB is a conditional SQL UPDATE; it takes no lock.
	ModeDB = "db"
	// ModeSQLRMW is SELECT, then UPDATE to the value read minus one, the
	// order's INSERT and COMMIT, in one transaction inside the lock: the
	// read-modify-write of stock kept in SQL.
	ModeSQLRMW = "sqlrmw"
	// ModeAsync is the lua mode's atomic script, which also queues the
	// order on a Redis Stream: the purchase answers 202 and a consumer
	// writes the order.
	ModeAsync = "async"
	// ModeMQ takes the unit as lua does, then publishes the order to
	// RabbitMQ: two systems and no transaction between them. The purchase
	// answers 202 once the broker confirmed; a consumer writes the order.
	ModeMQ = "mq"
)

// Defaults of a product, and of a purchase that names no lock or mode.
const (
	DefaultLock   = "token"
	DefaultMode   = ModeRMW
	DefaultShards = 5
	// MaxShards bounds the shards of one product; the least is 1.
	MaxShards = 64
)

// FirstNamedBuyer is the first user id of a named buyer (POST
// /api/sessions): the ids from here on are theirs, those below are the
// lab's, which a request may name in its body on a lab product. Below 2^53,
// so that a JavaScript number holds every id, and above the harness's
// (which draws its users below 2^52 plus its buyers).
const FirstNamedBuyer int64 = 3 << 51
