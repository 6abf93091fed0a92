// Package linkemu is a user-space link emulator for perf/regions.sh: it forwards IP packets
// between network namespaces (one TUN device in each) and gives every directed path between
// two of them a one-way delay with jitter, random loss and a token-bucket rate with a bounded
// queue. It works below TCP and QUIC alike, so both see the same loss (docs/decisions.md,
// "Simulated regions"). The kernel here has no netem qdisc; this replaces it for the benchmark.
package linkemu

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"time"
)

// Config is the emulator's JSON configuration:
//
//	{"prefix": 24, "mtu": 1500, "seed": 1,
//	 "nodes": [{"name": "origin", "netns": "xr-o", "addr": "10.77.0.2", "region": "b"}, …],
//	 "paths": [{"regions": ["a", "b"], "rtt": "100ms", "jitter": "2ms", "loss": 0.005,
//	            "rate_mbit": 1000, "queue": "100ms"},
//	           {"nodes": ["client", "edge1"], "rtt": "2ms"}]}
//
// A path entry joins two regions (or the same region twice: the path inside it) or two nodes,
// in both directions; a node pair's entry wins over its regions' entry. Every pair of nodes
// must be covered.
type Config struct {
	Prefix int      `json:"prefix"` // length of the shared subnet every node's address is in (default 24)
	MTU    int      `json:"mtu"`    // of every TUN device (default 1500)
	Seed   uint64   `json:"seed"`   // of the loss and jitter draws (default 1)
	Nodes  []Node   `json:"nodes"`
	Paths  []PathIn `json:"paths"`
}

// Node is one network namespace with its TUN device's address.
type Node struct {
	Name   string `json:"name"`
	Netns  string `json:"netns"`
	Addr   string `json:"addr"`
	Region string `json:"region"`

	addr netip.Addr
}

// PathIn is one path entry as written in the configuration.
type PathIn struct {
	Regions  []string `json:"regions"`
	Nodes    []string `json:"nodes"`
	RTT      string   `json:"rtt"`       // round-trip delay; each direction gets half
	Jitter   string   `json:"jitter"`    // each packet's one-way delay varies uniformly by ± this
	Loss     float64  `json:"loss"`      // probability that a packet is lost, per direction
	RateMbit float64  `json:"rate_mbit"` // per direction; 0: unlimited
	Queue    string   `json:"queue"`     // longest queueing delay before drop-tail (default 100ms)
}

// Link is the behaviour of one direction of a path.
type Link struct {
	Delay   time.Duration // one-way
	Jitter  time.Duration
	Loss    float64
	RateBps float64 // bits per second; 0: unlimited
	Queue   time.Duration
}

// Limits on configured values: beyond them a number is a typo, not an experiment.
const (
	maxNodes    = 64
	maxDelay    = 10 * time.Second
	maxRateMbit = 100_000
	// DefaultQueue is a path's longest queueing delay when "queue" is not set.
	DefaultQueue = 100 * time.Millisecond
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$`)

// ParseConfig reads and checks a configuration; the error names every bad entry.
func ParseConfig(b []byte) (*Config, error) {
	var c Config
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("linkemu config: %w", err)
	}
	if dec.More() {
		return nil, errors.New("linkemu config: trailing data after the JSON object")
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

func (c *Config) validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.Prefix == 0 {
		c.Prefix = 24
	}
	if c.MTU == 0 {
		c.MTU = 1500
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Prefix < 8 || c.Prefix > 30 {
		bad("prefix %d: want 8-30", c.Prefix)
	}
	if c.MTU < 576 || c.MTU > 65535 {
		bad("mtu %d: want 576-65535", c.MTU)
	}
	if len(c.Nodes) < 2 || len(c.Nodes) > maxNodes {
		bad("%d nodes: want 2-%d", len(c.Nodes), maxNodes)
	}
	names := map[string]bool{}
	nets := map[string]bool{}
	addrs := map[netip.Addr]bool{}
	regions := map[string]bool{}
	var subnet netip.Prefix
	for i := range c.Nodes {
		n := &c.Nodes[i]
		switch {
		case !nameRE.MatchString(n.Name):
			bad("node %d: name %q: want 1-32 of letters, digits, _.- ", i, n.Name)
		case names[n.Name]:
			bad("node %q: named twice", n.Name)
		}
		names[n.Name] = true
		switch {
		case !nameRE.MatchString(n.Netns):
			bad("node %q: netns %q: want 1-32 of letters, digits, _.- ", n.Name, n.Netns)
		case nets[n.Netns]:
			bad("node %q: netns %q used twice", n.Name, n.Netns)
		}
		nets[n.Netns] = true
		if !nameRE.MatchString(n.Region) {
			bad("node %q: region %q: want 1-32 of letters, digits, _.- ", n.Name, n.Region)
		}
		regions[n.Region] = true
		a, err := netip.ParseAddr(n.Addr)
		if err != nil || !a.Is4() {
			bad("node %q: addr %q: want an IPv4 address", n.Name, n.Addr)
			continue
		}
		if addrs[a] {
			bad("node %q: addr %s used twice", n.Name, a)
		}
		addrs[a] = true
		n.addr = a
		p, _ := a.Prefix(min(max(c.Prefix, 8), 30))
		if !subnet.IsValid() {
			subnet = p
		} else if p != subnet {
			bad("node %q: addr %s is outside %s (every node shares one subnet)", n.Name, a, subnet)
		}
	}
	for i, p := range c.Paths {
		if _, err := p.link(); err != nil {
			bad("path %d: %v", i, err)
		}
		switch {
		case len(p.Regions) > 0 && len(p.Nodes) > 0:
			bad("path %d: both regions and nodes", i)
		case len(p.Regions) == 2:
			for _, r := range p.Regions {
				if !regions[r] {
					bad("path %d: region %q has no node", i, r)
				}
			}
		case len(p.Nodes) == 2:
			for _, n := range p.Nodes {
				if !names[n] {
					bad("path %d: no node %q", i, n)
				}
			}
			if p.Nodes[0] == p.Nodes[1] {
				bad("path %d: a node to itself", i)
			}
		default:
			bad("path %d: want \"regions\" or \"nodes\" with two names", i)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("linkemu config: %w", errors.Join(errs...))
	}
	for i := range c.Nodes {
		for j := i + 1; j < len(c.Nodes); j++ {
			if _, ok := c.LinkBetween(c.Nodes[i].Name, c.Nodes[j].Name); !ok {
				bad("no path between nodes %q and %q (regions %q, %q)", c.Nodes[i].Name, c.Nodes[j].Name, c.Nodes[i].Region, c.Nodes[j].Region)
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("linkemu config: %w", errors.Join(errs...))
	}
	return nil
}

func (p PathIn) link() (Link, error) {
	dur := func(what, s string, def time.Duration) (time.Duration, error) {
		if s == "" {
			return def, nil
		}
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 || d > maxDelay {
			return 0, fmt.Errorf("%s %q: want a duration 0-%s", what, s, maxDelay)
		}
		return d, nil
	}
	rtt, err := dur("rtt", p.RTT, 0)
	if err != nil {
		return Link{}, err
	}
	jit, err := dur("jitter", p.Jitter, 0)
	if err != nil {
		return Link{}, err
	}
	q, err := dur("queue", p.Queue, DefaultQueue)
	if err != nil {
		return Link{}, err
	}
	if !(p.Loss >= 0 && p.Loss < 1) {
		return Link{}, fmt.Errorf("loss %v: want a probability in [0, 1)", p.Loss)
	}
	if !(p.RateMbit >= 0 && p.RateMbit <= maxRateMbit) {
		return Link{}, fmt.Errorf("rate_mbit %v: want 0 (unlimited) to %d", p.RateMbit, maxRateMbit)
	}
	return Link{Delay: rtt / 2, Jitter: jit, Loss: p.Loss, RateBps: p.RateMbit * 1e6, Queue: q}, nil
}

// LinkBetween is the link from node a to node b (paths are symmetric): a node pair's entry, else
// the entry of their regions; the last matching entry wins.
func (c *Config) LinkBetween(a, b string) (Link, bool) {
	na, nb := c.node(a), c.node(b)
	if na == nil || nb == nil {
		return Link{}, false
	}
	var found *PathIn
	for i := range c.Paths {
		p := &c.Paths[i]
		if len(p.Nodes) == 2 && pairIs(p.Nodes, a, b) {
			found = p
		}
	}
	if found == nil {
		for i := range c.Paths {
			p := &c.Paths[i]
			if len(p.Regions) == 2 && pairIs(p.Regions, na.Region, nb.Region) {
				found = p
			}
		}
	}
	if found == nil {
		return Link{}, false
	}
	l, err := found.link()
	return l, err == nil
}

func pairIs(p []string, a, b string) bool {
	return (p[0] == a && p[1] == b) || (p[0] == b && p[1] == a)
}

func (c *Config) node(name string) *Node {
	for i := range c.Nodes {
		if c.Nodes[i].Name == name {
			return &c.Nodes[i]
		}
	}
	return nil
}

// Address is the node's parsed address (valid after ParseConfig).
func (n *Node) Address() netip.Addr { return n.addr }
