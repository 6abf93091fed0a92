// Package tokens verifies client tokens on the edge with the origin's public keys: the JWKS is
// fetched at start, refreshed periodically (Run), and refetched at once when a token names a
// key the edge does not know yet (rate-limited, so garbage kids cannot hammer the origin).
package tokens

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"

	"github.com/xetcdn/xetcdn/shared/auth"
)

// KeySource returns the current key set (*originapi.Client).
type KeySource interface {
	JWKS(ctx context.Context) (*auth.KeySet, error)
}

// Options configure a Verifier. Source is required.
type Options struct {
	Source KeySource
	Leeway time.Duration // clock skew tolerated on exp/iat
	// Refresh is the period of Run's refetch; 5 min when zero.
	Refresh time.Duration
	// MinRefetch is the least time between refetches triggered by unknown kids; 10 s when zero.
	MinRefetch time.Duration
	// FetchTimeout bounds one fetch; 10 s when zero.
	FetchTimeout time.Duration
	Now          func() time.Time
	Log          *slog.Logger
	Registerer   prometheus.Registerer
}

// Verifier is safe for concurrent use.
type Verifier struct {
	o       Options
	cur     atomic.Pointer[auth.Verifier]
	flight  singleflight.Group
	mu      sync.Mutex
	lastTry time.Time
	lastOK  bool
	fetches *prometheus.CounterVec
}

// New returns a Verifier and tries one fetch (its error is returned with a usable Verifier
// that knows no key yet; Run and unknown kids retry).
func New(ctx context.Context, o Options) (*Verifier, error) {
	if o.Refresh <= 0 {
		o.Refresh = 5 * time.Minute
	}
	if o.MinRefetch <= 0 {
		o.MinRefetch = 10 * time.Second
	}
	if o.FetchTimeout <= 0 {
		o.FetchTimeout = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	v := &Verifier{o: o, fetches: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "xet_edge_jwks_fetches_total", Help: "Fetches of the origin's token keys by result."}, []string{"result"})}
	if o.Registerer != nil {
		o.Registerer.MustRegister(v.fetches)
	}
	empty, _ := auth.NewKeySet()
	v.cur.Store(auth.NewVerifier(empty, auth.VerifierOptions{Now: o.Now, Leeway: o.Leeway}))
	return v, v.refetch(ctx)
}

// Ready reports whether a key set was fetched at least once.
func (v *Verifier) Ready() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return !v.lastTry.IsZero() && v.lastOK
}

// VerifyRequest verifies r's bearer token (errors as auth.Verifier.Verify).
func (v *Verifier) VerifyRequest(r *http.Request) (*auth.Claims, error) {
	tok := auth.BearerToken(r)
	c, err := v.cur.Load().Verify(tok)
	if errors.Is(err, auth.ErrUnknownKey) && v.mayRefetch() {
		if v.refetch(r.Context()) == nil {
			c, err = v.cur.Load().Verify(tok)
		}
	}
	return c, err
}

func (v *Verifier) mayRefetch() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.o.Now().Sub(v.lastTry) >= v.o.MinRefetch
}

// refetch loads the key set once for all concurrent callers.
func (v *Verifier) refetch(ctx context.Context) error {
	ch := v.flight.DoChan("jwks", func() (any, error) {
		v.mu.Lock()
		v.lastTry = v.o.Now()
		v.mu.Unlock()
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), v.o.FetchTimeout)
		defer cancel()
		ks, err := v.o.Source.JWKS(fctx)
		v.mu.Lock()
		v.lastOK = v.lastOK || err == nil
		v.mu.Unlock()
		if err != nil {
			v.fetches.WithLabelValues("error").Inc()
			return nil, err
		}
		v.fetches.WithLabelValues("ok").Inc()
		v.cur.Store(auth.NewVerifier(ks, auth.VerifierOptions{Now: v.o.Now, Leeway: v.o.Leeway}))
		return nil, nil
	})
	select {
	case r := <-ch:
		return r.Err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run refetches the key set every Refresh (every MinRefetch while none was ever fetched)
// until ctx ends. Failures are logged and retried; the last good set stays in use.
func (v *Verifier) Run(ctx context.Context) {
	for {
		wait := v.o.Refresh
		if !v.Ready() {
			wait = v.o.MinRefetch
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
			if err := v.refetch(ctx); err != nil && ctx.Err() == nil {
				v.o.Log.Warn("refresh token keys from the origin", "err", err)
			}
		}
	}
}
