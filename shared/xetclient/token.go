package xetclient

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/xetcdn/xetcdn/shared/wire"
)

// RefreshMargin is how long before its expiry a token is replaced (hf_xet REFRESH_BUFFER_SEC).
const RefreshMargin = 30 * time.Second

// Token is a CAS access token. A zero Expiry means the token never expires.
type Token struct {
	Value  string
	Expiry time.Time
}

// TokenSource supplies the token for each CAS request. Implementations must be safe for
// concurrent use.
type TokenSource interface {
	Token(ctx context.Context) (Token, error)
}

// StaticToken is a token that never expires.
type StaticToken string

// Token returns the token itself.
func (s StaticToken) Token(context.Context) (Token, error) { return Token{Value: string(s)}, nil }

// RefreshingTokenSource caches the token of a fetch function and calls it again when the cached
// token expires within RefreshMargin. Concurrent callers wait for one refresh.
type RefreshingTokenSource struct {
	fetch func(ctx context.Context) (Token, error)
	now   func() time.Time

	mu  sync.Mutex
	tok Token
	ok  bool
}

// NewRefreshingTokenSource returns a source over fetch; fetch is called under a lock.
func NewRefreshingTokenSource(fetch func(ctx context.Context) (Token, error)) *RefreshingTokenSource {
	return &RefreshingTokenSource{fetch: fetch, now: time.Now}
}

// Token returns the cached token, refreshing it first when it expires within RefreshMargin.
func (s *RefreshingTokenSource) Token(ctx context.Context) (Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ok && (s.tok.Expiry.IsZero() || s.tok.Expiry.After(s.now().Add(RefreshMargin))) {
		return s.tok, nil
	}
	tok, err := s.fetch(ctx)
	if err != nil {
		return Token{}, err
	}
	s.tok, s.ok = tok, true
	return tok, nil
}

// invalidate makes the next Token call fetch.
func (s *RefreshingTokenSource) invalidate() {
	s.mu.Lock()
	s.ok = false
	s.mu.Unlock()
}

// HubTokenSource fetches tokens from a Hub-style token route: GET url (with header) answering
// {"casUrl":…,"exp":unix seconds,"accessToken":…} (docs/protocol.md §3.1). It refreshes 30 s
// before exp and remembers the latest casUrl.
type HubTokenSource struct {
	url    string
	header http.Header
	hc     *http.Client
	src    *RefreshingTokenSource

	mu     sync.Mutex
	casURL string

	renewMu   sync.Mutex // one renewal at a time (failover.go)
	lastRenew time.Time
}

// NewHubTokenSource returns a source fetching url with hc (http.DefaultClient when nil).
func NewHubTokenSource(url string, header http.Header, hc *http.Client) *HubTokenSource {
	if hc == nil {
		hc = http.DefaultClient
	}
	s := &HubTokenSource{url: url, header: header, hc: hc}
	s.src = NewRefreshingTokenSource(s.fetch)
	return s
}

// Token returns a token valid for at least RefreshMargin (or the fetch error).
func (s *HubTokenSource) Token(ctx context.Context) (Token, error) { return s.src.Token(ctx) }

// CasURL is the casUrl of the latest answer ("" before the first).
func (s *HubTokenSource) CasURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.casURL
}

func (s *HubTokenSource) fetch(ctx context.Context) (Token, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return Token{}, err
	}
	for k, vs := range s.header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return Token{}, fmt.Errorf("token url: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Token{}, newStatusError(resp)
	}
	// Both fields are at most 64000 characters (§3.1); 1 MiB bounds the answer generously.
	var t wire.Token
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&t); err != nil {
		return Token{}, fmt.Errorf("token url: decode answer: %w", err)
	}
	if t.AccessToken == "" {
		return Token{}, fmt.Errorf("token url: answer has no accessToken")
	}
	s.mu.Lock()
	s.casURL = t.CasURL
	s.mu.Unlock()
	tok := Token{Value: t.AccessToken}
	if t.Exp > 0 {
		tok.Expiry = time.Unix(t.Exp, 0)
	}
	return tok, nil
}
