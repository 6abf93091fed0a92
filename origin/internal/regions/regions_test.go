package regions

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/edgereg"
	"github.com/xetcdn/xetcdn/shared/internalapi"
)

func testMap(t *testing.T) *Map {
	t.Helper()
	m, err := Parse(Config{
		Order:          []string{"eu", "us", "ap"},
		Networks:       map[string]string{"10.1.0.0/16": "eu", "10.2.0.0/16": "us", "10.1.9.0/24": "us", "2001:db8::/32": "ap"},
		Default:        "us",
		TrustedProxies: []string{"192.0.2.10", "198.51.100.0/24"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestParseNamesBadEntries: every malformed entry of the region map or the trusted-proxy list is
// reported, each naming the entry, all at once.
func TestParseNamesBadEntries(t *testing.T) {
	_, err := Parse(Config{
		Order:          []string{"eu", "EU", "eu"},
		Networks:       map[string]string{"10.0.0.0/33": "eu", "banana": "eu", "10.3.0.0/16": "mars", "10.4.0.1": "eu", "10.4.0.1/32": "us"},
		Default:        "moon",
		TrustedProxies: []string{"192.0.2.10", "not-an-ip", "1.2.3.4/99"},
		Header:         "X Bad",
		EdgeTimeout:    -1,
	})
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("Parse = %v, want ErrInvalid", err)
	}
	for _, want := range []string{`"EU"`, `"eu" is listed twice`, `"10.0.0.0/33"`, `"banana"`, `"mars"`, `"moon"`,
		`"not-an-ip"`, `"1.2.3.4/99"`, `"X Bad"`, "edge_timeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "192.0.2.10") {
		t.Errorf("a good trusted proxy is reported:\n%v", err)
	}
	if _, err := Parse(Config{Networks: map[string]string{"10.0.0.0/8": "eu"}}); err == nil {
		t.Error("networks without order accepted")
	}
	if m, err := Parse(Config{}); err != nil || m.Region(httptest.NewRequest("GET", "/", nil)) != "" {
		t.Errorf("empty config: %v", err)
	}
}

// TestRegionOfCaller: networks by longest prefix, the documented default for an unmapped
// network, the region header only from trusted proxies (a forged one from anyone else is
// ignored), X-Forwarded-For followed only through trusted proxies.
func TestRegionOfCaller(t *testing.T) {
	m := testMap(t)
	for _, c := range []struct {
		name, remote, header, xff, want string
	}{
		{"mapped", "10.1.2.3:5000", "", "", "eu"},
		{"longest prefix wins", "10.1.9.7:5000", "", "", "us"},
		{"ipv6", "[2001:db8::1]:5000", "", "", "ap"},
		{"ipv4-mapped ipv6", "[::ffff:10.1.2.3]:5000", "", "", "eu"},
		{"unmapped -> default", "203.0.113.9:5000", "", "", "us"},
		{"unparsable peer -> default", "garbage", "", "", "us"},
		{"forged header from an untrusted client", "10.1.2.3:5000", "ap", "", "eu"},
		{"forged xff from an untrusted client", "10.1.2.3:5000", "", "10.2.0.1", "eu"},
		{"header from a trusted proxy", "192.0.2.10:443", "ap", "", "ap"},
		{"unknown header value from a trusted proxy -> network", "192.0.2.10:443", "mars", "10.2.3.4", "us"},
		{"xff through two trusted proxies", "198.51.100.7:443", "", "10.1.0.5, 192.0.2.10", "eu"},
		{"xff: spoofed left part ignored", "192.0.2.10:443", "", "10.2.0.1, 10.1.0.5", "eu"},
		{"xff malformed hop", "192.0.2.10:443", "", "10.2.0.1, nonsense", "us"},
		{"trusted proxy, no header, no xff -> proxy's own network", "192.0.2.10:443", "", "", "us"},
	} {
		r := httptest.NewRequest("GET", "/api/models/a/b/xet-read-token/main", nil)
		r.RemoteAddr = c.remote
		if c.header != "" {
			r.Header.Set(DefaultHeader, c.header)
		}
		if c.xff != "" {
			r.Header.Set("X-Forwarded-For", c.xff)
		}
		if got := m.Region(r); got != c.want {
			t.Errorf("%s: region %q, want %q", c.name, got, c.want)
		}
	}
}

func edge(url, region string, free int) edgereg.Record {
	return edgereg.Record{EdgeReport: internalapi.EdgeReport{URL: url, Region: region, Permits: 8, FreePermits: free, Ready: true},
		Seen: time.Now()}
}

// TestChoose: local first choice, spill when it has no permit, other regions in the configured
// order, then the origin; the choice is a function of the repository, stable under reordering
// of the registry, and removing an edge moves only the repositories it ranked first.
func TestChoose(t *testing.T) {
	m := testMap(t)
	eu := []edgereg.Record{edge("https://eu1", "eu", 4), edge("https://eu2", "eu", 4), edge("https://eu3", "eu", 4)}
	us := []edgereg.Record{edge("https://us1", "us", 4)}
	all := append(append([]edgereg.Record{}, eu...), us...)

	u, out := m.Choose("eu", "models/a/b", all)
	if out != Local || !strings.HasPrefix(u, "https://eu") {
		t.Fatalf("eu caller: %s %s, want a local eu edge", u, out)
	}
	rev := []edgereg.Record{all[3], all[2], all[1], all[0]}
	if u2, _ := m.Choose("eu", "models/a/b", rev); u2 != u {
		t.Errorf("choice depends on registry order: %s vs %s", u, u2)
	}
	// The first-ranked edge saturated: spill to another eu edge.
	sat := append([]edgereg.Record{}, all...)
	for i := range sat {
		if sat[i].URL == u {
			sat[i].FreePermits = 0
		}
	}
	if u2, out := m.Choose("eu", "models/a/b", sat); out != Spill || u2 == u || !strings.HasPrefix(u2, "https://eu") {
		t.Errorf("saturated first choice: %s %s, want a spill to another eu edge", u2, out)
	}
	// No eu edge with a permit: the next region in order (us).
	if u2, out := m.Choose("eu", "models/a/b", append(zeroFree(eu), us...)); out != OtherRegion || u2 != "https://us1" {
		t.Errorf("eu all saturated: %s %s, want us1 other_region", u2, out)
	}
	// A caller in ap (no edges): the order after its own region is eu, us.
	if _, out := m.Choose("ap", "models/a/b", all); out != OtherRegion {
		t.Errorf("ap caller: %s, want other_region", out)
	}
	if u2, out := m.Choose("eu", "models/a/b", zeroFree(all)); out != Origin || u2 != "" {
		t.Errorf("everything saturated: %q %s, want origin", u2, out)
	}
	if _, out := m.Choose("eu", "models/a/b", nil); out != Origin {
		t.Errorf("no edges: %s, want origin", out)
	}

	// Rendezvous: spread and minimal movement.
	first := map[string]string{}
	count := map[string]int{}
	for i := range 3000 {
		s := fmt.Sprintf("models/org/repo-%d", i)
		u, _ := m.Choose("eu", s, eu)
		first[s] = u
		count[u]++
	}
	for _, e := range eu {
		if count[e.URL] < 800 || count[e.URL] > 1200 {
			t.Errorf("edge %s got %d of 3000 repositories, want about 1000", e.URL, count[e.URL])
		}
	}
	without := eu[1:]
	for s, was := range first {
		u, _ := m.Choose("eu", s, without)
		if was != eu[0].URL && u != was {
			t.Fatalf("%s moved from %s to %s though its edge stayed", s, was, u)
		}
	}

	// No regions configured: every edge is one pool, callers have region "".
	flat, _ := Parse(Config{})
	if u, out := flat.Choose("", "models/a/b", all); out != Local || u == "" {
		t.Errorf("no regions: %s %s, want local", u, out)
	}
}

func zeroFree(rs []edgereg.Record) []edgereg.Record {
	out := append([]edgereg.Record{}, rs...)
	for i := range out {
		out[i].FreePermits = 0
	}
	return out
}
