// Package regions chooses the casUrl of a read token (docs/architecture.md §7): the caller's
// region from the configured client networks (or from a region header, only when the request
// comes through a configured trusted proxy), then a healthy edge of that region chosen by
// rendezvous hashing of the repository — so one repository's bytes are cached on one edge per
// region — spilling to the next edge of the ranking when an edge reports no free permits, then
// the other regions in the configured order, then the origin itself.
//
//	Map.Region(request) ─► region ─► Choose(region, scope, registry snapshot) ─► URL, outcome
package regions

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/xetcdn/xetcdn/origin/internal/edgereg"
	"github.com/xetcdn/xetcdn/shared/configfile"
	"github.com/xetcdn/xetcdn/shared/internalapi"
)

// DefaultHeader is the region header trusted proxies may set.
const DefaultHeader = "X-Xet-Region"

// Config is the "regions" section of the origin's configuration (docs/origin.md).
type Config struct {
	// Order lists the regions; a client whose region has no usable edge is sent to the other
	// regions in this order. Empty: no regions — every registered edge is one pool.
	Order []string `json:"order"`
	// Networks maps a client network (CIDR, or a single address) to its region.
	Networks map[string]string `json:"networks"`
	// Default is the region of a client no network matches; empty = the first of Order.
	Default string `json:"default"`
	// TrustedProxies (CIDRs or addresses) may name the client's region in Header, and their
	// X-Forwarded-For is followed to the client's address. Everyone else's header is ignored.
	TrustedProxies []string `json:"trusted_proxies"`
	// Header is the region header; empty = DefaultHeader.
	Header string `json:"header"`
	// EdgeTimeout: an edge with no heartbeat for longer is not handed out. 0 = the default (6 s).
	EdgeTimeout configfile.Duration `json:"edge_timeout"`
}

// ErrInvalid wraps every problem Parse reports.
var ErrInvalid = errors.New("regions: invalid")

// Map is a parsed Config.
type Map struct {
	order    []string
	nets     []network // longest prefix first
	def      string
	trusted  []netip.Prefix
	header   string
	timeout  configfile.Duration
	hasOrder bool
}

type network struct {
	p      netip.Prefix
	region string
}

// Parse checks c and returns its Map, or every bad entry (each named) joined.
func Parse(c Config) (*Map, error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...))
	}
	m := &Map{order: c.Order, def: c.Default, header: c.Header, timeout: c.EdgeTimeout, hasOrder: len(c.Order) > 0}
	if m.header == "" {
		m.header = DefaultHeader
	}
	seen := map[string]bool{}
	for _, r := range c.Order {
		if !internalapi.ValidRegion(r) {
			bad("regions.order: %q is not a region name (lower-case letters, digits, inner hyphens)", r)
		} else if seen[r] {
			bad("regions.order: %q is listed twice", r)
		}
		seen[r] = true
	}
	if m.def == "" && len(c.Order) > 0 {
		m.def = c.Order[0]
	} else if m.def != "" && !seen[m.def] {
		bad("regions.default: %q is not in regions.order", m.def)
	}
	if len(c.Order) == 0 && len(c.Networks) > 0 {
		bad("regions.networks needs regions.order")
	}
	for k, r := range c.Networks {
		p, err := parsePrefix(k)
		if err != nil {
			bad("regions.networks: %q: %v", k, err)
			continue
		}
		if !seen[r] {
			bad("regions.networks: %q maps to %q, which is not in regions.order", k, r)
			continue
		}
		m.nets = append(m.nets, network{p, r})
	}
	// Longest prefix first; ties (same network written twice, e.g. "10.0.0.1" and
	// "10.0.0.1/32") are refused as ambiguous unless they agree.
	sort.Slice(m.nets, func(i, j int) bool {
		if m.nets[i].p.Bits() != m.nets[j].p.Bits() {
			return m.nets[i].p.Bits() > m.nets[j].p.Bits()
		}
		return m.nets[i].p.String() < m.nets[j].p.String()
	})
	for i := 1; i < len(m.nets); i++ {
		if m.nets[i].p == m.nets[i-1].p && m.nets[i].region != m.nets[i-1].region {
			bad("regions.networks: %s is mapped to both %q and %q", m.nets[i].p, m.nets[i-1].region, m.nets[i].region)
		}
	}
	for _, t := range c.TrustedProxies {
		p, err := parsePrefix(t)
		if err != nil {
			bad("regions.trusted_proxies: %q: %v", t, err)
			continue
		}
		m.trusted = append(m.trusted, p)
	}
	if strings.TrimSpace(m.header) != m.header || http.CanonicalHeaderKey(m.header) == "" ||
		strings.ContainsAny(m.header, " :\t\r\n") {
		bad("regions.header %q is not a header name", m.header)
	}
	if c.EdgeTimeout < 0 {
		bad("regions.edge_timeout must not be negative")
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m, nil
}

// parsePrefix reads a CIDR or a single address (as its /32 or /128), normalised.
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, errors.New("not a CIDR network")
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, errors.New("not an address or CIDR network")
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// Known reports whether region may be registered: any well-formed name when no regions are
// configured, else one of Order.
func (m *Map) Known(region string) bool {
	return !m.hasOrder || slices.Contains(m.order, region)
}

// Timeout is the configured edge timeout (0 = the registry's default).
func (m *Map) Timeout() configfile.Duration { return m.timeout }

func (m *Map) isTrusted(a netip.Addr) bool {
	for _, p := range m.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Region is the region of r's caller: the region header if the peer is a trusted proxy and
// the header names a configured region; else the longest configured network containing the
// client address (the peer's, or through trusted proxies the right-most X-Forwarded-For
// address that is not itself a trusted proxy); else Default. "" when no regions are configured.
func (m *Map) Region(r *http.Request) string {
	if !m.hasOrder {
		return ""
	}
	client, ok := peer(r.RemoteAddr)
	if ok && m.isTrusted(client) {
		if h := r.Header.Get(m.header); h != "" && slices.Contains(m.order, h) {
			return h
		}
		client = m.forwardedClient(r, client)
	}
	if ok {
		for _, n := range m.nets {
			if n.p.Contains(client) {
				return n.region
			}
		}
	}
	return m.def
}

// forwardedClient walks X-Forwarded-For from the right past trusted proxies.
func (m *Map) forwardedClient(r *http.Request, proxy netip.Addr) netip.Addr {
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			return proxy // a malformed hop: trust nothing left of it
		}
		a = a.Unmap()
		if !m.isTrusted(a) {
			return a
		}
		proxy = a
	}
	return proxy
}

func peer(remote string) (netip.Addr, bool) {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// Outcomes of a choice, the label values of xet_origin_token_edge_choices_total.
const (
	Local       = "local"        // the repository's first-ranked healthy edge in the caller's region
	Spill       = "spill"        // a lower-ranked edge of the caller's region (the ones above had no free permit)
	OtherRegion = "other_region" // an edge of another region, in the configured order
	Origin      = "origin"       // no healthy edge with a free permit anywhere: the origin itself
	Static      = "static"       // no edge ever registered: the configured edge_url
)

// Choose picks the edge for a read of scope by a caller in region among the healthy records,
// and names the outcome; "" with Origin when none fits.
func (m *Map) Choose(region, scope string, healthy []edgereg.Record) (string, string) {
	regs := []string{region}
	if m.hasOrder {
		for _, r := range m.order {
			if r != region {
				regs = append(regs, r)
			}
		}
	}
	for i, reg := range regs {
		var cands []ranked
		for _, e := range healthy {
			if !m.hasOrder || e.Region == reg {
				cands = append(cands, ranked{e, score(scope, e.URL)})
			}
		}
		sort.Slice(cands, func(a, b int) bool {
			if cands[a].score != cands[b].score {
				return cands[a].score > cands[b].score
			}
			return cands[a].URL < cands[b].URL
		})
		for j, c := range cands {
			if c.FreePermits < 1 {
				continue
			}
			switch {
			case i > 0:
				return c.URL, OtherRegion
			case j > 0:
				return c.URL, Spill
			}
			return c.URL, Local
		}
	}
	return "", Origin
}

type ranked struct {
	edgereg.Record
	score uint64
}

// score is the rendezvous (highest random weight) score of edge url for scope: stable across
// replicas and restarts, and removing an edge moves only the repositories it ranked first.
func score(scope, url string) uint64 {
	h := sha256.New()
	h.Write([]byte(scope))
	h.Write([]byte{0})
	h.Write([]byte(url))
	var sum [sha256.Size]byte
	return binary.BigEndian.Uint64(h.Sum(sum[:0]))
}
