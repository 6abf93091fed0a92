// Package xetclient is a Go client of the Xet CAS protocol (docs/protocol.md §2, §10): it uploads
// files (chunking, deduplication within the upload and through the global dedup route, xorb
// packing, shard registration) and downloads them (reconstruction, parallel range fetches from
// signed transfer URLs, decoding, in-order output).
//
// A Client is safe for concurrent use by several goroutines. Build one with New and Close it when
// done (it owns its transport's idle connections, and the QUIC socket when HTTP/3 is used).
//
// Every CAS request carries the bearer token (when one is configured), an X-Xet-Session-Id that
// is fixed for the Client's lifetime, and the User-Agent. Requests to transfer URLs carry no
// Authorization header: the URLs carry their own signature.
//
// Errors: ErrNotFound (unknown file), ErrRangeNotSatisfiable (a range past the end of a file),
// *StatusError (any other unexpected HTTP status), *ShardError (a shard rejected by an NDJSON
// error frame); test with errors.Is / errors.As. Transient failures (transport errors, 5xx except
// 501, 408, 429, truncated or malformed bodies) are retried under Options.Retry before they are
// returned.
package xetclient

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// Protocol selects the HTTP version the Client speaks.
type Protocol uint8

// Protocols. HTTP1 is the default, as in the stock client (hf_xet is built HTTP/1.1-only).
const (
	// HTTP1 uses HTTP/1.1 over TCP (TLS for https URLs).
	HTTP1 Protocol = iota
	// HTTP2 uses HTTP/2: negotiated by ALPN on https URLs, with prior knowledge (h2c) on http URLs.
	HTTP2
	// HTTP3 uses HTTP/3 over QUIC (https URLs only).
	HTTP3
)

// String returns "http/1.1", "h2" or "h3".
func (p Protocol) String() string {
	switch p {
	case HTTP1:
		return "http/1.1"
	case HTTP2:
		return "h2"
	case HTTP3:
		return "h3"
	}
	return fmt.Sprintf("Protocol(%d)", uint8(p))
}

// Defaults used for zero Options fields.
const (
	DefaultConcurrency = 8
	DefaultBlockSize   = 256 << 20
	DefaultUserAgent   = "xetcdn-go/1"
	// DefaultPrefix is the prefix the stock client uses on the xorb and dedup routes.
	DefaultPrefix = "default"
	// QUICHandshakeTimeout bounds an HTTP/3 connection attempt that hears nothing from the
	// server (a closed or filtered UDP port); QUICIdleTimeout closes a silent HTTP/3 connection.
	QUICHandshakeTimeout = 10 * time.Second
	QUICIdleTimeout      = 30 * time.Second
)

// Options configure a Client. Only Endpoint (or TokenURL) is required.
type Options struct {
	// Endpoint is the CAS base URL, e.g. "https://cas.example.com". When empty, the casUrl of
	// the TokenURL answer is used.
	Endpoint string

	// Token is a bearer token that never expires. TokenSource, when set, takes precedence;
	// TokenURL builds a refreshing source from a Hub-style token route. With none of the three
	// no Authorization header is sent (a server running without auth).
	Token       string
	TokenSource TokenSource
	// TokenURL is fetched with GET and TokenHeader; it must answer {casUrl, exp, accessToken}
	// (docs/protocol.md §3.1). The token is refreshed 30 s before exp.
	TokenURL    string
	TokenHeader http.Header

	// HTTPClient, when set, is used for every request as is: Protocol and InsecureSkipVerify are
	// then ignored and Close does not close its transport.
	HTTPClient *http.Client
	// Protocol selects HTTP/1.1 (default), HTTP/2 or HTTP/3.
	Protocol Protocol
	// InsecureSkipVerify accepts any TLS certificate (self-signed test and dev servers).
	InsecureSkipVerify bool
	// RootCAs, when set, are the certificate authorities trusted instead of the system's (which
	// honour SSL_CERT_FILE and SSL_CERT_DIR on Unix). LoadCAFile reads a PEM file into a pool.
	RootCAs *x509.CertPool

	// Concurrency bounds parallel xorb uploads and parallel transfer GETs (default 8). An upload
	// holds up to Concurrency+1 xorbs (≤ 64 MiB each) in memory.
	Concurrency int
	// BlockSize is the span of one reconstruction request when downloading (default 256 MiB).
	BlockSize int64
	// Retry is the retry policy for transient failures.
	Retry RetryPolicy

	// UserAgent overrides DefaultUserAgent. Header is added to every request (CAS and transfer).
	UserAgent string
	Header    http.Header

	// DisableGlobalDedup skips the global dedup queries (GET /v1/chunks/...) during uploads.
	DisableGlobalDedup bool
	// DisableCompression uploads chunks uncompressed instead of choosing LZ4/BG4 like hf_xet.
	DisableCompression bool
}

// Client talks to one CAS endpoint. Create it with New; it is safe for concurrent use.
type Client struct {
	opts      Options
	endpoint  string // without trailing slash; "" until resolved from the token source
	tokens    TokenSource
	hc        *http.Client
	closeFn   func() error
	sessionID string
	// v1Recon and v1Shards remember a V2→V1 fallback for the Client's lifetime, as hf_xet does.
	v1Recon  atomic.Bool
	v1Shards atomic.Bool
	// answered is set by the first HTTP answer: until then a failure to connect (refused, no
	// QUIC answer, an untrusted certificate) is reported at once instead of being retried.
	answered atomic.Bool
	// failovers counts token route renewals after a dead edge (failover.go).
	failovers atomic.Int64
}

// New validates opts and builds a Client. It does no network I/O.
func New(opts Options) (*Client, error) {
	if opts.Endpoint == "" && opts.TokenURL == "" {
		return nil, errors.New("xetclient: Options.Endpoint or Options.TokenURL is required")
	}
	if opts.Endpoint != "" {
		u, err := url.Parse(opts.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("xetclient: endpoint %q is not an http(s) URL", opts.Endpoint)
		}
		if opts.Protocol == HTTP3 && u.Scheme != "https" {
			return nil, fmt.Errorf("xetclient: HTTP/3 needs an https endpoint, got %q", opts.Endpoint)
		}
	}
	if opts.Protocol > HTTP3 {
		return nil, fmt.Errorf("xetclient: unknown protocol %d", opts.Protocol)
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.BlockSize <= 0 {
		opts.BlockSize = DefaultBlockSize
	}
	if opts.UserAgent == "" {
		opts.UserAgent = DefaultUserAgent
	}
	opts.Retry = opts.Retry.withDefaults()
	c := &Client{
		opts:      opts,
		endpoint:  strings.TrimRight(opts.Endpoint, "/"),
		sessionID: newSessionID(),
		closeFn:   func() error { return nil },
	}
	if opts.HTTPClient != nil {
		c.hc = opts.HTTPClient
	} else {
		c.hc, c.closeFn = newHTTPClient(opts)
	}
	switch {
	case opts.TokenSource != nil:
		c.tokens = opts.TokenSource
	case opts.TokenURL != "":
		c.tokens = NewHubTokenSource(opts.TokenURL, opts.TokenHeader, c.hc)
	case opts.Token != "":
		c.tokens = StaticToken(opts.Token)
	}
	return c, nil
}

// Close releases idle connections (and the QUIC socket of HTTP/3). Calls in flight fail.
func (c *Client) Close() error { return c.closeFn() }

// SessionID is the X-Xet-Session-Id this Client sends.
func (c *Client) SessionID() string { return c.sessionID }

// newHTTPClient builds the transport for opts.Protocol and returns the client and its closer.
func newHTTPClient(opts Options) (*http.Client, func() error) {
	var tlsConf *tls.Config
	if opts.InsecureSkipVerify || opts.RootCAs != nil {
		tlsConf = &tls.Config{InsecureSkipVerify: opts.InsecureSkipVerify, RootCAs: opts.RootCAs} //nolint:gosec // asked for explicitly
	}
	d := &net.Dialer{Timeout: 60 * time.Second, KeepAlive: 30 * time.Second}
	t := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         d.DialContext,
		TLSClientConfig:     tlsConf,
		TLSHandshakeTimeout: 30 * time.Second,
		MaxIdleConnsPerHost: 2 * opts.Concurrency,
		IdleConnTimeout:     60 * time.Second,
		DisableCompression:  true, // the protocol never compresses unless asked; nor do we
		Protocols:           new(http.Protocols),
	}
	if opts.Protocol == HTTP2 {
		t.Protocols.SetHTTP2(true)
		t.Protocols.SetUnencryptedHTTP2(true)
	} else {
		t.Protocols.SetHTTP1(true)
	}
	if opts.Protocol == HTTP3 {
		h3 := &http3.Transport{TLSClientConfig: tlsConf, DisableCompression: true,
			QUICConfig: &quic.Config{HandshakeIdleTimeout: QUICHandshakeTimeout, MaxIdleTimeout: QUICIdleTimeout}}
		rt := h3OrPlain{h3: h3, plain: t}
		return &http.Client{Transport: rt}, func() error { t.CloseIdleConnections(); return h3.Close() }
	}
	return &http.Client{Transport: t}, func() error { t.CloseIdleConnections(); return nil }
}

// h3OrPlain sends https requests over HTTP/3 and plain http ones over HTTP/1.1: QUIC needs TLS,
// and a server may hand out plain-HTTP transfer URLs (an edge behind a TLS-terminating load
// balancer, or its plain listener) even when the CAS endpoint speaks HTTP/3.
type h3OrPlain struct {
	h3    http.RoundTripper
	plain http.RoundTripper
}

func (t h3OrPlain) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme == "https" {
		return t.h3.RoundTrip(r)
	}
	return t.plain.RoundTrip(r)
}

// LoadCAFile reads the PEM certificates of path into a pool for Options.RootCAs.
func LoadCAFile(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// newSessionID returns a UUID version 7 (time-ordered), the form hf_xet sends.
func newSessionID() string {
	var b [16]byte
	_, _ = rand.Read(b[6:]) // crypto/rand.Read never fails
	ms := uint64(time.Now().UnixMilli())
	for i := 0; i < 6; i++ {
		b[i] = byte(ms >> (40 - 8*i))
	}
	b[6] = b[6]&0x0f | 0x70
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// base returns the CAS base URL, resolving it from the token source's casUrl when Options gave
// none.
func (c *Client) base(ctx context.Context) (string, error) {
	if c.endpoint != "" {
		return c.endpoint, nil
	}
	hs, ok := c.tokens.(*HubTokenSource)
	if !ok {
		return "", errors.New("xetclient: no endpoint")
	}
	if _, err := hs.Token(ctx); err != nil {
		return "", err
	}
	u := hs.CasURL()
	if u == "" {
		return "", errors.New("xetclient: token answer has no casUrl")
	}
	return strings.TrimRight(u, "/"), nil
}

// newRequest builds a CAS request (auth=true) or a transfer request (auth=false) with the
// session headers.
func (c *Client) newRequest(ctx context.Context, method, u string, auth bool) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	for k, vs := range c.opts.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("User-Agent", c.opts.UserAgent)
	req.Header.Set("X-Xet-Session-Id", c.sessionID)
	if auth && c.tokens != nil {
		tok, err := c.tokens.Token(ctx)
		if err != nil {
			return nil, fmt.Errorf("token: %w", err)
		}
		if tok.Value != "" {
			req.Header.Set("Authorization", "Bearer "+tok.Value)
		}
	}
	return req, nil
}
