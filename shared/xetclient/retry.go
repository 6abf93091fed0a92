package xetclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/quic-go/quic-go"
)

var (
	// ErrNotFound: the CAS does not know the file (404 on the reconstruction routes).
	ErrNotFound = errors.New("xetclient: file not found")
	// ErrRangeNotSatisfiable: the requested range starts at or past the end of the file (416).
	ErrRangeNotSatisfiable = errors.New("xetclient: range not satisfiable")
	// ErrCorrupt: the server sent bytes that are not what the protocol promises (a transfer body
	// that does not decode to the announced chunks, an answer that breaks the client rules).
	ErrCorrupt = errors.New("xetclient: corrupt answer")
	// ErrSizeMismatch: DownloadOptions.Size is not the size of the file (the file ended earlier,
	// or has bytes past it). Nothing is wrong with the server's answers.
	ErrSizeMismatch = errors.New("xetclient: size mismatch")
)

// StatusError is an HTTP answer with an unexpected status.
type StatusError struct {
	Method string
	URL    string // without query string (transfer URLs carry signatures there)
	Status int
	// Message is the start of the response body (the "error" of a JSON error body when present).
	Message string
}

func (e *StatusError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("%s %s: %d %s", e.Method, e.URL, e.Status, http.StatusText(e.Status))
	}
	return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.URL, e.Status, http.StatusText(e.Status), e.Message)
}

// newStatusError reads up to 1 KiB of the body for the message; it does not close the body.
func newStatusError(resp *http.Response) *StatusError {
	u := *resp.Request.URL
	u.RawQuery = ""
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	msg := strings.TrimSpace(string(b))
	var body struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(b, &body) == nil && body.Error != "" {
		msg = body.Error
	}
	return &StatusError{Method: resp.Request.Method, URL: u.String(), Status: resp.StatusCode, Message: msg}
}

// retryableStatus reports the statuses hf_xet retries (docs/protocol.md §2.11): 5xx except 501,
// 408 and 429.
func retryableStatus(code int) bool {
	return (code >= 500 && code != http.StatusNotImplemented) || code == http.StatusRequestTimeout ||
		code == http.StatusTooManyRequests
}

// transientError marks an error of one attempt that a retry may cure (a broken or malformed
// body).
type transientError struct{ err error }

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }

// transient wraps err so that the retry loop tries again.
func transient(err error) error {
	if err == nil {
		return nil
	}
	return &transientError{err}
}

// RetryPolicy bounds retries of transient failures. Delays grow by a factor of 3 from BaseDelay
// (capped at MaxDelay) and are jittered to [d/2, d).
type RetryPolicy struct {
	// MaxAttempts is the number of attempts including the first (default 6, as hf_xet: five
	// retries). 1 disables retries.
	MaxAttempts int
	// BaseDelay is the delay before the first retry (default 1 s).
	BaseDelay time.Duration
	// MaxDelay caps each delay (default 1 min).
	MaxDelay time.Duration
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 6
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = time.Second
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = time.Minute
	}
	return p
}

// delay is the jittered wait before retry number n (0-based).
func (p RetryPolicy) delay(n int) time.Duration {
	d := p.BaseDelay
	for i := 0; i < n && d < p.MaxDelay; i++ {
		d *= 3
	}
	d = min(d, p.MaxDelay)
	return d/2 + rand.N(d/2+1)
}

// wait sleeps before retry n or returns ctx's error.
func (p RetryPolicy) wait(ctx context.Context, n int) error {
	t := time.NewTimer(p.delay(n))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// retryable reports whether err (from an attempt under ctx) is worth another attempt.
func retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var se *StatusError
	if errors.As(err, &se) {
		return retryableStatus(se.Status)
	}
	var te *transientError
	if errors.As(err, &te) {
		return true
	}
	// Transport errors of Do (connection refused or reset, timeouts, TLS and QUIC failures) come
	// as *url.Error; hf_xet retries all of them. Anything else is a fatal error of ours.
	var ue *url.Error
	return errors.As(err, &ue)
}

// attempt is one try of a retried operation. It returns a *StatusError for an unexpected status,
// a transient error for a broken body, and anything else for transport failures.
type attempt func(ctx context.Context) error

// retry runs fn until it succeeds, fails with a non-retryable error, or MaxAttempts is reached.
func (c *Client) retry(ctx context.Context, fn attempt) error {
	p := c.opts.Retry
	for n := 0; ; n++ {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		if n+1 >= p.MaxAttempts || !retryable(ctx, err) || IsCertificateError(err) ||
			(!c.answered.Load() && IsUnreachable(err)) {
			return err
		}
		if werr := p.wait(ctx, n); werr != nil {
			return err
		}
	}
}

// send performs req and returns the response when its status is 2xx; otherwise the body is
// read into a *StatusError and closed.
func (c *Client) send(req *http.Request) (*http.Response, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	c.answered.Store(true)
	if resp.StatusCode/100 != 2 {
		se := newStatusError(resp)
		resp.Body.Close()
		return nil, se
	}
	return resp, nil
}

// IsCertificateError reports whether err is a failure to verify the server's TLS certificate
// (unknown authority, wrong host name, expired): retrying cannot cure it.
func IsCertificateError(err error) bool {
	var (
		ua x509.UnknownAuthorityError
		he x509.HostnameError
		ci x509.CertificateInvalidError
		cv *tls.CertificateVerificationError
	)
	if errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci) || errors.As(err, &cv) {
		return true
	}
	// QUIC reports the TLS failure as a transport error carrying the text only.
	return err != nil && strings.Contains(err.Error(), "x509: ")
}

// IsUnreachable reports whether err is a failure to reach the server at all: a refused TCP
// connection, a failed dial, or no QUIC answer within QUICHandshakeTimeout.
func IsUnreachable(err error) bool {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return true
	}
	var it *quic.IdleTimeoutError
	var ht *quic.HandshakeTimeoutError
	return errors.As(err, &it) || errors.As(err, &ht)
}

// isStatus reports whether err is a *StatusError with one of the codes.
func isStatus(err error, codes ...int) bool {
	var se *StatusError
	if !errors.As(err, &se) {
		return false
	}
	for _, c := range codes {
		if se.Status == c {
			return true
		}
	}
	return false
}
