package main

import (
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// TestPrivateSurfaces runs the binary as deployed, with an admin listener given only a port,
// on both backends, and plays the outsider of issue 9: the admin listener is on loopback only;
// its hide route and pprof refuse requests without a token (401) and with client or edge tokens
// (403), and a refused hide changes nothing; an edge token mints no client token on the
// Hub-style token route; and 404 bodies for unknown, foreign and hidden files are the fixed
// not-found body, with no SQL, scope or internal route in them.
func TestPrivateSurfaces(t *testing.T) {
	onEachBackend(t, func(t *testing.T, o *proc) {
		_, port, _ := net.SplitHostPort(testenv.FreeAddr(t))
		o.args = append(o.args, "--admin-listen", ":"+port)
		p := o.start(t)
		testPrivateSurfaces(t, o, p.Log(), port)
	})
}

func testPrivateSurfaces(t *testing.T, o *proc, log, port string) {
	const scope, other = "models/acme/secret", "models/evil/probe"
	admin := "http://127.0.0.1:" + port

	// Loopback only: the serving line names it, and no other address of the host answers.
	if !strings.Contains(log, `"admin":"127.0.0.1:`+port+`"`) {
		t.Errorf("the origin does not report its admin listener on 127.0.0.1:%s; log:\n%s", port, log)
	}
	if ip := hostAddress(); ip != "" {
		if c, err := net.DialTimeout("tcp", net.JoinHostPort(ip, port), 2*time.Second); err == nil {
			c.Close()
			t.Errorf("the admin listener answers on %s", ip)
		}
	} else {
		t.Logf("no non-loopback address on this host: reachability from outside checked by the log only")
	}

	rng := mrand.New(mrand.NewPCG(9, 9))
	f := makeFile(makeXorb(rng, 2))
	w, r := o.token(t, scope, "write"), o.token(t, scope, "read")
	for _, x := range f.xorbs {
		if st, b := call(t, "POST", o.base()+x.path(), w, x.body); st != 200 {
			t.Fatalf("xorb: %d %s", st, b)
		}
	}
	if st, b := call(t, "POST", o.base()+"/v1/shards", w, f.shard); st != 200 {
		t.Fatalf("shard: %d %s", st, b)
	}
	recon := o.base() + "/v2/reconstructions/" + f.hash.String()
	edgeTok, adminTok := o.token(t, "", "edge"), o.token(t, "", "admin")

	// The admin listener: nothing without an admin token.
	hide, _ := json.Marshal(map[string]any{"scope": scope})
	for _, c := range []struct {
		name, tok string
		status    int
	}{
		{"no token", "", 401},
		{"read", r, 403},
		{"write", w, 403},
		{"edge", edgeTok, 403},
	} {
		if st, b := call(t, "POST", admin+"/admin/v1/hide", c.tok, hide); st != c.status {
			t.Errorf("hide with %s: %d %s, want %d", c.name, st, b, c.status)
		}
		for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/heap"} {
			if st, b := call(t, "GET", admin+path, c.tok, nil); st != c.status {
				t.Errorf("%s with %s: %d %.80q, want %d", path, c.name, st, b, c.status)
			}
		}
	}
	if st, b := call(t, "GET", recon, r, nil); st != 200 {
		t.Fatalf("the file after refused hides: %d %s", st, b)
	}
	if st, _ := call(t, "GET", admin+"/metrics", "", nil); st != 200 {
		t.Errorf("/metrics without a token: %d, want 200 (scrapers)", st)
	}
	if st, _ := call(t, "GET", admin+"/debug/pprof/cmdline", adminTok, nil); st != 200 {
		t.Errorf("pprof with the admin token: %d", st)
	}

	// The Hub-style token route: an edge token is no key to every scope.
	for _, op := range []string{"read", "write"} {
		route := fmt.Sprintf("%s/api/models/evil/probe/xet-%s-token/main", o.base(), op)
		if st, b := call(t, "GET", route, edgeTok, nil); st != 403 || strings.Contains(string(b), "accessToken") {
			t.Errorf("%s token with an edge token: %d %s, want 403", op, st, b)
		}
	}
	if st, b := call(t, "GET", o.base()+"/api/models/acme/secret/xet-read-token/main", w, nil); st != 200 {
		t.Errorf("read token with the scope's write token: %d %s", st, b)
	}

	// 404 bodies.
	notFound := func(what, url, tok string) {
		t.Helper()
		st, b := call(t, "GET", url, tok, nil)
		var got struct{ Error, Code string }
		if err := json.Unmarshal(b, &got); st != 404 || err != nil || got.Error != "not found" || got.Code != "not_found" {
			t.Errorf("%s: %d %s, want 404 with the fixed not-found body", what, st, b)
		}
		for _, leak := range []string{"sql", "rows", "index", "internal", scope, other} {
			if strings.Contains(string(b), leak) {
				t.Errorf("%s: body %s reveals %q", what, b, leak)
			}
		}
	}
	mine := o.token(t, other, "read")
	notFound("unknown file", o.base()+"/v1/reconstructions/"+hash.Chunk([]byte("none")).String(), r)
	notFound("foreign file", recon, mine)
	notFound("internal record of another scope", o.base()+"/internal/v1/files/"+f.hash.String()+"?scope="+other, edgeTok)
	if st, b := call(t, "POST", admin+"/admin/v1/hide", adminTok, hide); st != 200 {
		t.Fatalf("hide with the admin token: %d %s", st, b)
	}
	notFound("hidden file", recon, r)
}

// hostAddress is a non-loopback IPv4 address of this host, or "" when it has none.
func hostAddress() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}
