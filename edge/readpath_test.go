package edge

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/shared/readpath/readpathtest"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// TestReadPathConformance runs the readpath.Source conformance suite (and the shared handlers
// over it) on the edge's layer stack (metadata cache, singleflight, origin client; data cache)
// with a real origin behind it. The Hide is posted to the origin's admin listener and counts as
// done once the edge applied the origin's revocation event.
func TestReadPathConformance(t *testing.T) {
	const scope = "models/read/path"
	o, admin := startOriginAdmin(t, t.TempDir())
	f := upload(t, o, o.token(t, scope, "write"), 21, 3, 6)
	e := startEdge(t, o, t.TempDir())
	fx := &readpathtest.Fixture{Source: e.Source(), Scope: scope, File: f.hash, Size: uint64(len(f.data)),
		Xorbs: map[hash.Hash][]byte{}}
	for i, l := range f.layouts {
		fx.Xorbs[l.Hash] = f.bodies[i]
	}
	fx.Hide = func(t *testing.T) {
		before := e.metric(t, "xet_edge_metacache_revocations_total")
		body, _ := json.Marshal(map[string]any{"scope": scope, "files": []string{f.hash.String()}})
		if st, ans := call(t, "POST", admin+"/admin/v1/hide", o.token(t, "", "admin"), body); st != 200 {
			t.Fatalf("hide: %d %s", st, ans)
		}
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		deadline := time.NewTimer(revokeDeadline)
		defer deadline.Stop()
		for e.metric(t, "xet_edge_metacache_revocations_total") == before {
			select {
			case <-deadline.C:
				t.Fatalf("the edge applied no revocation within %v of the hide", revokeDeadline)
			case <-tick.C:
			}
		}
	}
	readpathtest.Run(t, fx)
}
