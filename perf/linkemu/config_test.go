package linkemu

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

const goodConfig = `{"nodes": [
  {"name": "origin", "netns": "xr-o", "addr": "10.77.0.2", "region": "b"},
  {"name": "edge1", "netns": "xr-e1", "addr": "10.77.0.11", "region": "a"},
  {"name": "client", "netns": "xr-c", "addr": "10.77.0.21", "region": "a"}],
 "paths": [
  {"regions": ["a", "a"], "rtt": "2ms", "rate_mbit": 1000},
  {"regions": ["b", "a"], "rtt": "100ms", "jitter": "1ms", "loss": 0.005, "rate_mbit": 1000, "queue": "50ms"},
  {"nodes": ["client", "origin"], "rtt": "30ms"}]}`

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(goodConfig))
	if err != nil {
		t.Fatal(err)
	}
	if c.Prefix != 24 || c.MTU != 1500 || c.Seed != 1 {
		t.Fatalf("defaults: prefix %d mtu %d seed %d", c.Prefix, c.MTU, c.Seed)
	}
	if c.Nodes[1].Address() != netip.MustParseAddr("10.77.0.11") {
		t.Fatalf("address %v", c.Nodes[1].Address())
	}
	for _, tc := range []struct {
		a, b string
		want Link
	}{
		{"edge1", "client", Link{Delay: time.Millisecond, RateBps: 1e9, Queue: DefaultQueue}},
		{"edge1", "origin", Link{Delay: 50 * time.Millisecond, Jitter: time.Millisecond, Loss: 0.005, RateBps: 1e9, Queue: 50 * time.Millisecond}},
		{"origin", "edge1", Link{Delay: 50 * time.Millisecond, Jitter: time.Millisecond, Loss: 0.005, RateBps: 1e9, Queue: 50 * time.Millisecond}},
		{"origin", "client", Link{Delay: 15 * time.Millisecond, Queue: DefaultQueue}}, // the node pair wins
	} {
		got, ok := c.LinkBetween(tc.a, tc.b)
		if !ok || got != tc.want {
			t.Errorf("%s→%s: %+v %v, want %+v", tc.a, tc.b, got, ok, tc.want)
		}
	}
}

func TestParseConfigRejects(t *testing.T) {
	nodes := `[{"name":"a","netns":"n1","addr":"10.0.0.1","region":"r"},{"name":"b","netns":"n2","addr":"10.0.0.2","region":"s"}]`
	path := func(p string) string { return `{"nodes":` + nodes + `,"paths":[` + p + `]}` }
	for _, tc := range []struct{ in, want string }{
		{`{"nodes":` + nodes + `,"paths":[]}`, `no path between nodes "a" and "b"`},
		{path(`{"regions":["r","s"],"loss":1}`), "loss 1: want a probability"},
		{path(`{"regions":["r","s"],"loss":-0.1}`), "loss -0.1"},
		{path(`{"regions":["r","s"],"rtt":"-1ms"}`), `rtt "-1ms"`},
		{path(`{"regions":["r","s"],"rtt":"fast"}`), `rtt "fast"`},
		{path(`{"regions":["r","s"],"jitter":"11s"}`), `jitter "11s"`},
		{path(`{"regions":["r","s"],"rate_mbit":-5}`), "rate_mbit -5"},
		{path(`{"regions":["r","x"]}`), `region "x" has no node`},
		{path(`{"nodes":["a","zz"]}`), `no node "zz"`},
		{path(`{"nodes":["a","a"]}`), "a node to itself"},
		{path(`{"regions":["r"]}`), "want \"regions\" or \"nodes\" with two names"},
		{path(`{"regions":["r","s"],"nodes":["a","b"]}`), "both regions and nodes"},
		{path(`{"regions":["r","s"],"speed":1}`), `unknown field "speed"`},
		{`{"nodes":[{"name":"a","netns":"n1","addr":"10.0.0.1","region":"r"},{"name":"a","netns":"n1","addr":"10.0.0.1","region":"r"}],"paths":[{"regions":["r","r"]}]}`, `node "a": named twice`},
		{`{"nodes":[{"name":"a","netns":"n1","addr":"10.0.0.1","region":"r"},{"name":"b","netns":"n1","addr":"10.0.0.1","region":"r"}],"paths":[{"regions":["r","r"]}]}`, `netns "n1" used twice`},
		{`{"nodes":[{"name":"a","netns":"n1","addr":"10.0.0.1","region":"r"},{"name":"b","netns":"n2","addr":"10.0.0.1","region":"r"}],"paths":[{"regions":["r","r"]}]}`, "addr 10.0.0.1 used twice"},
		{`{"nodes":[{"name":"a","netns":"n1","addr":"10.0.0.1","region":"r"},{"name":"b","netns":"n2","addr":"10.0.1.1","region":"r"}],"paths":[{"regions":["r","r"]}]}`, "outside 10.0.0.0/24"},
		{`{"nodes":[{"name":"a","netns":"n/1","addr":"10.0.0.1","region":"r"},{"name":"b","netns":"n2","addr":"::1","region":"r"}],"paths":[{"regions":["r","r"]}]}`, `netns "n/1"`},
		{`{"nodes":[{"name":"a","netns":"n1","addr":"10.0.0.1","region":"r"},{"name":"b","netns":"n2","addr":"::1","region":"r"}],"paths":[{"regions":["r","r"]}]}`, `addr "::1": want an IPv4`},
		{`{"mtu":100,"nodes":` + nodes + `,"paths":[{"regions":["r","s"]}]}`, "mtu 100"},
		{`{"nodes":` + nodes + `,"paths":[{"regions":["r","s"]}]} {}`, "trailing data"},
		{`{"nodes":[]}`, "0 nodes"},
		{`[`, "linkemu config"},
	} {
		_, err := ParseConfig([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s\n  error %v, want one containing %q", tc.in, err, tc.want)
		}
	}
}

// FuzzParseConfig: any input is either refused with an error or gives a configuration whose
// every node pair has a usable link.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(goodConfig))
	f.Add([]byte(`{"nodes":[{"name":"a","netns":"n1","addr":"10.0.0.1","region":"r"},{"name":"b","netns":"n2","addr":"10.0.0.2","region":"r"}],"paths":[{"regions":["r","r"],"rtt":"1h"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b)
		if err != nil {
			return
		}
		for _, a := range c.Nodes {
			if !a.Address().Is4() {
				t.Fatalf("node %s: address %v", a.Name, a.Address())
			}
			for _, b := range c.Nodes {
				if a.Name == b.Name {
					continue
				}
				l, ok := c.LinkBetween(a.Name, b.Name)
				if !ok || l.Loss < 0 || l.Loss >= 1 || l.Delay < 0 || l.Delay > maxDelay || l.RateBps < 0 {
					t.Fatalf("%s→%s: %+v %v", a.Name, b.Name, l, ok)
				}
			}
		}
	})
}

func FuzzDestination(f *testing.F) {
	f.Add([]byte{0x45, 0, 0, 20, 0, 0, 0, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2})
	f.Add(make([]byte, 40))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := Destination(b)
		if err != nil {
			return
		}
		switch b[0] >> 4 {
		case 4:
			if !a.Is4() || a != netip.AddrFrom4([4]byte(b[16:20])) {
				t.Fatalf("IPv4 destination %v", a)
			}
		case 6:
			if !a.Is6() || len(b) < 40 {
				t.Fatalf("IPv6 destination %v from %d bytes", a, len(b))
			}
		default:
			t.Fatalf("version %d accepted", b[0]>>4)
		}
	})
}
