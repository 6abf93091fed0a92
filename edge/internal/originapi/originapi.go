// Package originapi is the edge's client of the origin's internal API (docs/protocol.md
// §16.3): file records by hash and scope, xorb layouts, raw xorb byte ranges, the token key set
// and the visibility event stream. Every call carries the edge's token. Routes, parameters and
// answer formats are shared/internalapi's, the package the origin serves them with.
//
// Failures are reported with the sentinels below so the edge can answer them the same way
// everywhere: ErrNotFound (404), ErrUnavailable (502: refused, reset, 5xx, malformed answer)
// and ErrTimeout (504: no answer within Options.Timeout). A call cancelled by its caller
// returns the context's error.
package originapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/internalapi"
	"github.com/xetcdn/xetcdn/shared/recon"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// Errors; test with errors.Is.
var (
	// ErrNotFound: the origin does not have the object, or the file is not visible in the scope.
	ErrNotFound = errors.New("origin: not found")
	// ErrUnavailable: the origin could not be reached or gave an unusable answer.
	ErrUnavailable = errors.New("origin: unavailable")
	// ErrTimeout: the origin did not answer within the configured wait.
	ErrTimeout = errors.New("origin: timeout")
)

// Limits on what the client reads from the origin.
const (
	// MaxLayoutsPerCall is how many layouts one /internal/v1/layouts request asks for (at most
	// internalapi.MaxLayoutsPerRequest). With up to 8,192 chunks (~320 KiB) per layout this
	// bounds one answer to about 21 MiB.
	MaxLayoutsPerCall = 64
	maxSmallBody      = 4 << 20
)

// Options configure a Client. BaseURL and Token are required.
type Options struct {
	BaseURL string // e.g. "http://origin:8080"
	Token   string // access "edge"
	// Timeout bounds each call, body included; 10 s when zero.
	Timeout time.Duration
	// Transport for the calls; a tuned http.Transport when nil.
	Transport  http.RoundTripper
	Registerer prometheus.Registerer
}

// Client calls the origin. It is safe for concurrent use.
type Client struct {
	base    *url.URL
	auth    string
	timeout time.Duration
	hc      *http.Client
	rt      http.RoundTripper
	m       *metrics
}

// New returns a Client.
func New(o Options) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(o.BaseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("originapi: base URL %q is not an http(s) URL", o.BaseURL)
	}
	if o.Token == "" {
		return nil, errors.New("originapi: token is required")
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Transport == nil {
		o.Transport = NewTransport()
	}
	return &Client{base: u, auth: "Bearer " + o.Token, timeout: o.Timeout,
		hc: &http.Client{Transport: o.Transport}, rt: o.Transport, m: newMetrics(o.Registerer)}, nil
}

// NewTransport is the transport the edge uses towards the origin: many idle connections (the
// edge multiplexes many clients onto one origin) and a short dial timeout so an unreachable
// origin fails fast.
func NewTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   128,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// Base is the origin's base URL.
func (c *Client) Base() *url.URL { return c.base }

// Transport is the round tripper the client uses; the edge's proxy shares it.
func (c *Client) Transport() http.RoundTripper { return c.rt }

// File returns the record of file h if it is visible in scope (ErrNotFound otherwise).
func (c *Client) File(ctx context.Context, h hash.Hash, scope string) (*recon.FileRecord, error) {
	var rec *recon.FileRecord
	err := c.do(ctx, "file", http.MethodGet, internalapi.FileTarget(h, scope), nil,
		func(resp *http.Response) error {
			b, err := readAll(resp.Body, internalapi.MaxFileAnswer)
			if err != nil {
				return err
			}
			rec, err = internalapi.DecodeFile(b, h)
			return err
		})
	return rec, err
}

// Visible reports (nil or ErrNotFound) whether file h is visible in scope, without
// transferring its record.
func (c *Client) Visible(ctx context.Context, h hash.Hash, scope string) error {
	return c.do(ctx, "visible", http.MethodHead, internalapi.FileTarget(h, scope), nil, nil)
}

// Layouts returns the verified layouts of the xorbs in hs that the origin has (at most
// MaxLayoutsPerCall hashes per call; more is an error). Missing xorbs are left out.
func (c *Client) Layouts(ctx context.Context, hs []hash.Hash) (map[hash.Hash]*xorb.Layout, error) {
	if len(hs) == 0 || len(hs) > MaxLayoutsPerCall {
		return nil, fmt.Errorf("originapi: %d layouts asked, want 1 to %d", len(hs), MaxLayoutsPerCall)
	}
	var out map[hash.Hash]*xorb.Layout
	err := c.do(ctx, "layouts", http.MethodGet, internalapi.LayoutsTarget(hs), nil, func(resp *http.Response) error {
		b, err := readAll(resp.Body, internalapi.MaxLayoutsAnswer(len(hs)))
		if err != nil {
			return err
		}
		out, err = internalapi.DecodeLayouts(b, hs)
		return err
	})
	return out, err
}

// FetchXorbRange returns the raw stored bytes [start, end) of xorb h. The caller closes the
// reader; reading it fails with an error wrapping ErrUnavailable when the origin sends fewer
// bytes than asked. The client's timeout bounds the wait for the answer's header and then
// every wait for more bytes (a stall), not the whole transfer: a long answer over a slow path
// (the data cache's chained fills ask for several segments at once) is not cut while its bytes
// keep coming (docs/decisions.md, 2026-12-01 chained fills).
func (c *Client) FetchXorbRange(ctx context.Context, h hash.Hash, start, end int64) (io.ReadCloser, error) {
	if start < 0 || end <= start {
		return nil, fmt.Errorf("originapi: bad xorb range [%d,%d)", start, end)
	}
	hdr := http.Header{"Range": {"bytes=" + strconv.FormatInt(start, 10) + "-" + strconv.FormatInt(end-1, 10)}}
	ctx, cancel := context.WithCancel(ctx)
	b := &body{cancel: cancel, left: end - start, c: c, parent: ctx}
	b.stall = time.AfterFunc(c.timeout, func() {
		b.stalled.Store(true)
		cancel()
	})
	resp, err := c.send(ctx, "xorb", http.MethodGet, internalapi.XorbTarget(h), hdr)
	if err != nil {
		b.stall.Stop()
		cancel()
		return nil, b.timedOut(err)
	}
	if resp.StatusCode != http.StatusPartialContent || resp.ContentLength != end-start {
		resp.Body.Close()
		b.stall.Stop()
		cancel()
		c.m.errors.WithLabelValues("xorb", "protocol").Inc()
		return nil, fmt.Errorf("%w: xorb %s range [%d,%d): status %d, %d bytes", ErrUnavailable, h, start, end,
			resp.StatusCode, resp.ContentLength)
	}
	b.rc = resp.Body
	return b, nil
}

// body counts the bytes of a xorb transfer, cancels it when no byte came for the client's
// timeout, and releases it on Close.
type body struct {
	rc      io.ReadCloser
	cancel  context.CancelFunc
	left    int64
	c       *Client
	parent  context.Context
	stall   *time.Timer // cancels the transfer after the client's timeout without progress
	stalled atomic.Bool // the stall timer fired
}

// timedOut is err, or a timeout error when the stall timer ended the transfer.
func (b *body) timedOut(err error) error {
	if b.stalled.Load() && !errors.Is(err, ErrTimeout) {
		b.c.m.errors.WithLabelValues("xorb", "timeout").Inc()
		return fmt.Errorf("%w: xorb: no bytes for %s: %w", ErrTimeout, b.c.timeout, context.DeadlineExceeded)
	}
	return err
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		b.stall.Reset(b.c.timeout)
	}
	b.left -= int64(n)
	b.c.m.xorbBytes.Add(float64(n))
	if err == io.EOF && b.left > 0 {
		err = fmt.Errorf("%w: xorb transfer ended %d bytes short: %w", ErrUnavailable, b.left, io.ErrUnexpectedEOF)
	} else if err != nil && err != io.EOF {
		if b.stalled.Load() {
			err = b.timedOut(err)
		} else {
			err = b.c.classify(b.parent, "xorb", err)
		}
	}
	return n, err
}

func (b *body) Close() error {
	b.stall.Stop()
	err := b.rc.Close()
	b.cancel()
	return err
}

// JWKS returns the origin's token verification keys.
func (c *Client) JWKS(ctx context.Context) (*auth.KeySet, error) {
	var ks *auth.KeySet
	err := c.do(ctx, "jwks", http.MethodGet, internalapi.JWKSPath, nil, func(resp *http.Response) error {
		b, err := readAll(resp.Body, maxSmallBody)
		if err != nil {
			return err
		}
		ks, err = auth.ParseJWKS(b)
		return err
	})
	return ks, err
}

// Event is one visibility revocation: Files of Scope (nil: every file of it) are no longer
// visible there.
type Event = internalapi.Event

// Events returns the events after seq, waiting up to wait on the origin when there are none.
// The call's timeout is wait plus the client's timeout.
func (c *Client) Events(ctx context.Context, after int64, wait time.Duration) ([]Event, error) {
	ctx, cancel := context.WithTimeout(ctx, wait+c.timeout)
	defer cancel()
	var out []Event
	err := c.doNoTimeout(ctx, "events", http.MethodGet, internalapi.EventsTarget(after, wait), nil, func(resp *http.Response) error {
		b, err := readAll(resp.Body, internalapi.MaxEventsAnswer)
		if err != nil {
			return err
		}
		out, err = internalapi.DecodeEvents(b, after)
		return err
	})
	return out, err
}

// Ping checks that the origin answers its health route.
func (c *Client) Ping(ctx context.Context) error {
	return c.do(ctx, "ping", http.MethodGet, "/healthz", nil, func(*http.Response) error { return nil })
}

// do runs one call under the client's timeout. decode reads a 2xx answer (nil: ignore the body).
func (c *Client) do(ctx context.Context, call, method, path string, hdr http.Header, decode func(*http.Response) error) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return c.doNoTimeout(ctx, call, method, path, hdr, decode)
}

func (c *Client) doNoTimeout(ctx context.Context, call, method, path string, hdr http.Header, decode func(*http.Response) error) error {
	resp, err := c.send(ctx, call, method, path, hdr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		c.m.errors.WithLabelValues(call, "status").Inc()
		return fmt.Errorf("%w: %s %s: status %d", ErrUnavailable, method, path, resp.StatusCode)
	}
	if decode == nil {
		return nil
	}
	if err := decode(resp); err != nil {
		if ctx.Err() != nil || isNetErr(err) {
			return c.classify(ctx, call, err)
		}
		c.m.errors.WithLabelValues(call, "protocol").Inc()
		return fmt.Errorf("%w: %s %s: %w", ErrUnavailable, method, path, err)
	}
	return nil
}

// send issues the request; a 404 becomes ErrNotFound (body closed), other statuses are the
// caller's to check.
func (c *Client) send(ctx context.Context, call, method, path string, hdr http.Header) (*http.Response, error) {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, method, c.base.String()+path, nil)
	if err != nil {
		return nil, fmt.Errorf("originapi: %w", err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", c.auth)
	resp, err := c.hc.Do(req)
	c.m.duration.WithLabelValues(call).Observe(time.Since(start).Seconds())
	if err != nil {
		c.m.requests.WithLabelValues(call, "error").Inc()
		return nil, c.classify(ctx, call, err)
	}
	c.m.requests.WithLabelValues(call, strconv.Itoa(resp.StatusCode)).Inc()
	if resp.StatusCode == http.StatusNotFound {
		resp.Body.Close()
		return nil, fmt.Errorf("%w: %s %s", ErrNotFound, method, path)
	}
	return resp, nil
}

// classify turns a transport error into ErrTimeout/ErrUnavailable, or the caller's own
// cancellation. ctx is the call's context (with the client's timeout).
func (c *Client) classify(ctx context.Context, call string, err error) error {
	switch {
	case errors.Is(err, ErrUnavailable), errors.Is(err, ErrTimeout):
		return err
	case errors.Is(ctx.Err(), context.Canceled):
		return ctx.Err()
	case errors.Is(ctx.Err(), context.DeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		c.m.errors.WithLabelValues(call, "timeout").Inc()
		return fmt.Errorf("%w: %s: %w", ErrTimeout, call, err)
	}
	c.m.errors.WithLabelValues(call, "unavailable").Inc()
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, call, err)
}

func isNetErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF)
}

// readAll reads r up to limit bytes; more is an error.
func readAll(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("answer longer than %d bytes", limit)
	}
	return b, nil
}

type metrics struct {
	requests  *prometheus.CounterVec
	errors    *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	xorbBytes prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xet_edge_origin_requests_total",
			Help: "Calls to the origin's internal API by call and status code (error: no answer)."}, []string{"call", "code"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xet_edge_origin_errors_total",
			Help: "Failed calls to the origin by call and kind (unavailable, timeout, status, protocol)."}, []string{"call", "kind"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "xet_edge_origin_request_duration_seconds",
			Help: "Time to the origin's answer headers by call.", Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10)}, []string{"call"}),
		xorbBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "xet_edge_origin_xorb_bytes_total",
			Help: "Xorb bytes received from the origin (cache fills)."}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.errors, m.duration, m.xorbBytes)
	}
	return m
}
