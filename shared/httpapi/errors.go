// Package httpapi is the HTTP plumbing both tiers share: the one mapping from errors to an HTTP
// status and JSON error body, request ids, body readers that enforce a size limit and a pace
// floor, and JSON writers.
//
// It imports only shared packages, never a tier. A tier adds its own sentinels (index and object
// store errors on the origin, say) as extra Rules when it builds its Errors value.
package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/httprange"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/urlsign"
	"github.com/xetcdn/xetcdn/shared/wire"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// Generic error kinds. Code that has no package sentinel of its own wraps one of these
// (fmt.Errorf("%w: prefix %q", httpapi.ErrBadRequest, p)) to choose the status.
var (
	ErrBadRequest          = errors.New("bad request")            // 400
	ErrNotFound            = errors.New("not found")              // 404
	ErrTimeout             = errors.New("request body too slow")  // 408
	ErrTooLarge            = errors.New("request body too large") // 413
	ErrRangeNotSatisfiable = errors.New("range not satisfiable")  // 416
	ErrUnavailable         = errors.New("service unavailable")    // 503 + Retry-After
	ErrMethod              = errors.New("method not allowed")     // 405
)

// Rule maps errors that match Err (errors.Is) to Status and the short machine-readable Code.
type Rule struct {
	Err    error
	Status int
	Code   string
}

// sharedRules cover the sentinels of the shared packages. They are checked after a tier's
// extra rules, in order; the first match wins.
func sharedRules() []Rule {
	return []Rule{
		{auth.ErrInsufficient, http.StatusForbidden, "forbidden"},
		{auth.ErrMissing, http.StatusUnauthorized, "unauthorized"},
		{auth.ErrMalformed, http.StatusUnauthorized, "unauthorized"},
		{auth.ErrExpired, http.StatusUnauthorized, "token_expired"},
		{auth.ErrBadSignature, http.StatusUnauthorized, "unauthorized"},
		{auth.ErrUnknownKey, http.StatusUnauthorized, "unauthorized"},
		{ErrTimeout, http.StatusRequestTimeout, "too_slow"},
		{ErrTooLarge, http.StatusRequestEntityTooLarge, "too_large"},
		{xorb.ErrTooLarge, http.StatusRequestEntityTooLarge, "too_large"},
		{shard.ErrTooLarge, http.StatusRequestEntityTooLarge, "too_large"},
		{xorb.ErrHashMismatch, http.StatusBadRequest, "hash_mismatch"},
		{xorb.ErrCorrupt, http.StatusBadRequest, "bad_xorb"},
		{xorb.ErrEmpty, http.StatusBadRequest, "bad_xorb"},
		{shard.ErrCorrupt, http.StatusBadRequest, "bad_shard"},
		{shard.ErrInvalid, http.StatusBadRequest, "bad_shard"},
		{hash.ErrSyntax, http.StatusBadRequest, "bad_hash"},
		{urlsign.ErrDenied, http.StatusForbidden, "transfer_denied"},
		{httprange.ErrSyntax, http.StatusRequestedRangeNotSatisfiable, "bad_range"},
		{httprange.ErrUnsatisfiable, http.StatusRequestedRangeNotSatisfiable, "range_not_satisfiable"},
		{recon.ErrRangeNotSatisfiable, http.StatusRequestedRangeNotSatisfiable, "range_not_satisfiable"},
		{ErrBadRequest, http.StatusBadRequest, "bad_request"},
		{ErrNotFound, http.StatusNotFound, "not_found"},
		{ErrMethod, http.StatusMethodNotAllowed, "method_not_allowed"},
		{ErrRangeNotSatisfiable, http.StatusRequestedRangeNotSatisfiable, "range_not_satisfiable"},
		{ErrUnavailable, http.StatusServiceUnavailable, "unavailable"},
		{context.DeadlineExceeded, http.StatusServiceUnavailable, "timeout"},
	}
}

// Errors turns errors into HTTP answers. Build it once per server; it is safe for concurrent use.
type Errors struct {
	rules      []Rule
	log        *slog.Logger
	retryAfter string
}

// ErrorsOptions configure an Errors.
type ErrorsOptions struct {
	Log *slog.Logger // unknown errors (500) are logged here; nil discards
	// RetryAfter is sent with every 503; zero means 5 s.
	RetryAfter time.Duration
	// Extra rules are checked before the shared ones.
	Extra []Rule
}

// NewErrors builds the error mapper.
func NewErrors(o ErrorsOptions) *Errors {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.RetryAfter <= 0 {
		o.RetryAfter = 5 * time.Second
	}
	secs := int((o.RetryAfter + time.Second - 1) / time.Second)
	return &Errors{rules: append(append([]Rule(nil), o.Extra...), sharedRules()...), log: o.Log,
		retryAfter: strconv.Itoa(secs)}
}

// Status is the one mapping from an error to an HTTP status and short code. Errors matching no
// rule are internal (500, "internal"). A *http.MaxBytesError is 413; a cancelled request 499
// (the client is gone; nobody reads the answer).
func (e *Errors) Status(err error) (status int, code string) {
	for _, r := range e.rules {
		if errors.Is(err, r.Err) {
			return r.Status, r.Code
		}
	}
	var mb *http.MaxBytesError
	switch {
	case errors.As(err, &mb):
		return http.StatusRequestEntityTooLarge, "too_large"
	case errors.Is(err, context.Canceled):
		return 499, "client_closed"
	}
	return http.StatusInternalServerError, "internal"
}

// Write answers err as {"error": message, "code": code}. 503 answers carry Retry-After.
//
// The message tells the client what was wrong with its request, never what the server holds:
// only the statuses of detailedStatus (400, 401, 403, 405, 408, 409, 413, 429: a malformed request, a
// missing or insufficient token, a request its own scope refuses, a body too big or too slow,
// too many requests) carry err's text, which describes
// the request itself. Every other status gets the fixed text of publicMessage — no driver
// error (`sql: no rows in result set`), internal route, scope, object key or stored size
// reaches a client through a 404, 416 or 5xx — and the detail goes to the log with the request
// id (500s at error level, other 5xx at warn, the rest at debug: 404s are routine).
// Write must be called before anything else was written to w.
func (e *Errors) Write(w http.ResponseWriter, r *http.Request, err error) {
	status, code := e.Status(err)
	msg := PublicMessage(status, err)
	if !detailedStatus(status) {
		level := slog.LevelDebug
		switch {
		case status == http.StatusInternalServerError:
			level = slog.LevelError
		case status >= 500:
			level = slog.LevelWarn
		}
		e.log.Log(r.Context(), level, "request failed", "status", status, "code", code, "method", r.Method,
			"path", r.URL.Path, "request_id", RequestID(r.Context()), "err", err)
	}
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", e.retryAfter)
	}
	if status == http.StatusRequestTimeout || status == http.StatusRequestEntityTooLarge {
		// The rest of the body is not read; do not let the server try to drain it.
		w.Header().Set("Connection", "close")
	}
	WriteJSON(w, status, ErrorBody{Error: msg, Code: code})
}

// detailedStatus reports whether an answer with status may carry the error's own text: the
// statuses whose errors describe the client's request (its syntax, its token, its size or
// pace), not the server's state.
func detailedStatus(status int) bool {
	switch status {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden,
		http.StatusMethodNotAllowed, http.StatusRequestTimeout, http.StatusRequestEntityTooLarge,
		http.StatusTooManyRequests, http.StatusConflict:
		return true
	}
	return false
}

// PublicMessage is the message a client may see for err answered with status: err's text for
// the statuses whose errors describe the request (400, 401, 403, 405, 408, 413, 429), a fixed text
// for every other status. Streams that report errors after their answer started (NDJSON
// frames) use it too; the caller logs the detail.
func PublicMessage(status int, err error) string {
	if detailedStatus(status) {
		return err.Error()
	}
	switch status {
	case http.StatusNotFound:
		return "not found"
	case http.StatusRequestedRangeNotSatisfiable:
		return "range not satisfiable"
	case 499:
		return "client closed the request"
	case http.StatusInternalServerError:
		return "internal error"
	case http.StatusBadGateway:
		return "bad gateway: the origin failed; retry later"
	case http.StatusServiceUnavailable:
		return "service unavailable"
	case http.StatusGatewayTimeout:
		return "gateway timeout: the origin did not answer in time; retry later"
	}
	if t := http.StatusText(status); t != "" {
		return strings.ToLower(t)
	}
	return "error"
}

// ErrorBody is the JSON body of every error answer.
type ErrorBody = wire.ErrorBody
