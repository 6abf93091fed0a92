// Package edgereg is the origin's registry of edges (docs/architecture.md §7): each edge
// reports itself over the internal API every few seconds (shared/internalapi.EdgeReport), and
// the reports live in one small table of the index's database (SQLite or Postgres), so every
// origin replica sees the same edges. The table is the registry's own, created by this package
// beside the index's tables; index.Index does not know it.
//
// An edge is handed out (State Healthy) while its last report is younger than the configured
// timeout and said ready. Nothing is ever deleted by a report's absence: a stale edge is listed
// as stale until it has been silent for Forget, then its row is removed.
package edgereg

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xetcdn/xetcdn/shared/internalapi"
)

// ErrUnavailable wraps failures of the registry's database.
var ErrUnavailable = errors.New("edgereg: registry unavailable")

// Forget is how long a silent edge stays listed (as stale) before its row is removed.
const Forget = 24 * time.Hour

// DefaultTimeout is how long an edge stays healthy after its last report unless configured.
const DefaultTimeout = 6 * time.Second

// snapshotTTL is how old the token route's view of the registry may be.
const snapshotTTL = time.Second

// Record is one edge as the registry holds it: its last report and when it came.
type Record struct {
	internalapi.EdgeReport
	First time.Time // first report of this URL (since Forget last removed it)
	Seen  time.Time // last report
}

// State of a registered edge.
type State string

// States, as listed and as the xet_origin_edges metric labels them.
const (
	Healthy  State = "healthy"   // handed out
	NotReady State = "not_ready" // reported, but said not ready
	Stale    State = "stale"     // no report within the timeout
)

// Store persists records. Both implementations are safe for concurrent use.
type Store interface {
	// Put inserts or replaces the record of r.URL, keeping First of an existing row, and
	// removes rows not seen since forgetBefore.
	Put(ctx context.Context, r Record, forgetBefore time.Time) error
	// List returns every record, in no particular order.
	List(ctx context.Context) ([]Record, error)
	Close() error
}

// Registry is the registry the server uses: reports in, a recent snapshot of states out.
type Registry struct {
	store   Store
	timeout time.Duration
	now     func() time.Time

	mu      sync.Mutex
	snap    []Record
	snapAt  time.Time
	snapErr error
}

// Options configure a Registry.
type Options struct {
	Store Store
	// Timeout: an edge with no report for longer is stale. 0 = DefaultTimeout.
	Timeout time.Duration
	// Now is the clock; nil = time.Now.
	Now func() time.Time
	// Registerer receives xet_origin_edges{region,state}; nil registers nowhere.
	Registerer prometheus.Registerer
}

// New builds a Registry on o.Store (which it does not close).
func New(o Options) *Registry {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	g := &Registry{store: o.Store, timeout: o.Timeout, now: o.Now}
	if o.Registerer != nil {
		o.Registerer.MustRegister(collector{g})
	}
	return g
}

// Timeout is how long an edge stays healthy after a report.
func (g *Registry) Timeout() time.Duration { return g.timeout }

// Interval is the heartbeat interval edges are asked for: a third of the timeout, so that one
// lost report does not take a healthy edge out of rotation.
func (g *Registry) Interval() time.Duration { return max(time.Second, g.timeout/3) }

// Report records a validated report.
func (g *Registry) Report(ctx context.Context, r internalapi.EdgeReport) error {
	now := g.now()
	return g.store.Put(ctx, Record{EdgeReport: r, First: now, Seen: now}, now.Add(-Forget))
}

// StateOf is rec's state at now for a registry with this timeout.
func StateOf(rec Record, now time.Time, timeout time.Duration) State {
	switch {
	case now.Sub(rec.Seen) > timeout:
		return Stale
	case !rec.Ready:
		return NotReady
	}
	return Healthy
}

// State is rec's state now.
func (g *Registry) State(rec Record) State { return StateOf(rec, g.now(), g.timeout) }

// List reads every record from the store, sorted by region then URL.
func (g *Registry) List(ctx context.Context) ([]Record, error) {
	recs, err := g.store.List(ctx)
	if err != nil {
		return nil, err
	}
	sort.Slice(recs, func(i, j int) bool {
		if recs[i].Region != recs[j].Region {
			return recs[i].Region < recs[j].Region
		}
		return recs[i].URL < recs[j].URL
	})
	return recs, nil
}

// Snapshot is the registry at most snapshotTTL old, read from the store under ctx when older.
// When the store fails, the last good snapshot is returned with the error (nil before the
// first success), so a database hiccup does not empty the token route's choice.
func (g *Registry) Snapshot(ctx context.Context) ([]Record, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	if g.snapAt.IsZero() || now.Sub(g.snapAt) >= snapshotTTL || now.Before(g.snapAt) {
		recs, err := g.List(ctx)
		g.snapAt, g.snapErr = now, err
		if err == nil {
			g.snap = recs
		}
	}
	return g.snap, g.snapErr
}

// collector exports xet_origin_edges{region,state} from a fresh listing at scrape time.
type collector struct{ g *Registry }

var edgesDesc = prometheus.NewDesc("xet_origin_edges",
	"Registered edges by region and state (healthy: handed out; not_ready; stale: no heartbeat within regions.edge_timeout).",
	[]string{"region", "state"}, nil)

func (c collector) Describe(ch chan<- *prometheus.Desc) { ch <- edgesDesc }

func (c collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	recs, err := c.g.Snapshot(ctx)
	if err != nil && recs == nil {
		ch <- prometheus.NewInvalidMetric(edgesDesc, err)
		return
	}
	type key struct {
		region string
		state  State
	}
	n := map[key]int{}
	now := c.g.now()
	for _, r := range recs {
		n[key{r.Region, StateOf(r, now, c.g.timeout)}]++
		// Every state of a region present, so a dashboard sees 0 rather than no series.
		for _, s := range []State{Healthy, NotReady, Stale} {
			n[key{r.Region, s}] += 0
		}
	}
	for k, v := range n {
		ch <- prometheus.MustNewConstMetric(edgesDesc, prometheus.GaugeValue, float64(v), k.region, string(k.state))
	}
}
