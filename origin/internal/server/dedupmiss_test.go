package server

import (
	"bytes"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// TestDedupMissAnswer: the dedup route's precomputed 404 is byte for byte the answer the error
// path writes for the same miss (status, headers, body), and the request metrics count it.
func TestDedupMissAnswer(t *testing.T) {
	e := newEnv(t, sqliteLocal())
	unknown := hash.Chunk([]byte("no such chunk"))
	resp := e.do("GET", "/v1/chunks/default-merkledb/"+unknown.String(), e.token("models/a/b", auth.Read), nil)
	got := read(t, resp)

	want := httptest.NewRecorder()
	e.srv.errs.Write(want, httptest.NewRequest("GET", "/", nil), noDedupEntry(unknown))
	if resp.StatusCode != want.Code || !bytes.Equal(got, want.Body.Bytes()) {
		t.Fatalf("miss answered %d %q, the error path answers %d %q", resp.StatusCode, got, want.Code, want.Body.Bytes())
	}
	for _, h := range []string{"Content-Type", "Content-Length"} {
		if resp.Header.Get(h) != want.Header().Get(h) {
			t.Errorf("%s %q, the error path sets %q", h, resp.Header.Get(h), want.Header().Get(h))
		}
	}
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counted := false
	for _, mf := range mfs {
		if mf.GetName() != "xet_origin_http_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == "404" && m.GetCounter().GetValue() == 1 {
					counted = true
				}
			}
		}
	}
	if !counted {
		t.Error("the miss is not counted as one 404 in xet_origin_http_requests_total")
	}

	// On SQLite the server finds the index's filter under the decorators, and once the filter
	// is built a miss is answered from it, with the same answer.
	f, ok := index.DedupFilterOf(e.srv.idx)
	if !ok || f != e.srv.absent {
		t.Fatalf("DedupFilterOf(%T) = %v, %v; the server holds %v", e.srv.idx, f, ok, e.srv.absent)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !f.DedupAbsent(unknown) {
		if time.Now().After(deadline) {
			t.Fatal("the dedup filter never answered for an unknown chunk")
		}
		time.Sleep(20 * time.Millisecond)
	}
	resp = e.do("GET", "/v1/chunks/default/"+unknown.String(), e.token("models/a/b", auth.Read), nil)
	if got := read(t, resp); resp.StatusCode != want.Code || !bytes.Equal(got, want.Body.Bytes()) {
		t.Fatalf("miss from the filter answered %d %q, want %d %q", resp.StatusCode, got, want.Code, want.Body.Bytes())
	}
}
