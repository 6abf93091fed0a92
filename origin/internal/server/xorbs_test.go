package server

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/ingest"
	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

func TestXorbUpload(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) { testXorbUpload(t, b) })
	}
}

func testXorbUpload(t *testing.T, b backend) {
	e := newEnv(t, b)
	f := makeFixture(t, 1, 1, 20, 3000)
	h := f.layouts[0].Hash.String()
	w := e.token("models/a/b", auth.Write)
	var got struct {
		WasInserted *bool `json:"was_inserted"`
	}
	if err := json.Unmarshal(expect(t, e.do("POST", "/v1/xorbs/default/"+h, w, f.xorbs[0]), 200), &got); err != nil || got.WasInserted == nil || !*got.WasInserted {
		t.Fatalf("first upload: %+v %v", got, err)
	}
	got.WasInserted = nil
	if err := json.Unmarshal(expect(t, e.do("POST", "/v1/xorbs/default/"+h, w, f.xorbs[0]), 200), &got); err != nil || got.WasInserted == nil || *got.WasInserted {
		t.Fatalf("second upload: %+v %v", got, err)
	}
	resp := e.do("HEAD", "/v1/xorbs/default/"+h, e.token("models/a/b", auth.Read), nil)
	expect(t, resp, 200)
	// Another scope did not upload it: to it the xorb does not exist (docs/security.md).
	expect(t, e.do("HEAD", "/v1/xorbs/default/"+h, e.token("x", auth.Read), nil), 404)
	want := len(f.xorbs[0]) + xorb.FooterLen(20) + 4
	if resp.Header.Get("Content-Length") != strconv.Itoa(want) {
		t.Fatalf("HEAD Content-Length %s, want %d", resp.Header.Get("Content-Length"), want)
	}
}

func TestXorbUploadRejects(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) { testXorbUploadRejects(t, b) })
	}
}

func testXorbUploadRejects(t *testing.T, b backend) {
	e := newEnv(t, b)
	f := makeFixture(t, 2, 1, 20, 3000)
	other := makeFixture(t, 3, 1, 5, 3000)
	h := f.layouts[0].Hash.String()
	body := f.xorbs[0]
	w := e.token("models/a/b", auth.Write)
	expired, _, _ := e.keys.Signing.Mint("models/a/b", auth.Write, e.clock.Now().Add(-2*3600e9), 3600e9)
	tests := []struct {
		name   string
		path   string
		token  string
		body   []byte
		status int
	}{
		{"no token", "/v1/xorbs/default/" + h, "", body, 401},
		{"garbage token", "/v1/xorbs/default/" + h, "abc", body, 401},
		{"expired token", "/v1/xorbs/default/" + h, expired, body, 401},
		{"read token", "/v1/xorbs/default/" + h, e.token("models/a/b", auth.Read), body, 403},
		{"malformed hash", "/v1/xorbs/default/xyz", w, body, 400},
		{"bad prefix", "/v1/xorbs/other/" + h, w, body, 400},
		{"hash mismatch", "/v1/xorbs/default/" + other.layouts[0].Hash.String(), w, body, 400},
		{"truncated", "/v1/xorbs/default/" + h, w, body[:len(body)-7], 400},
		{"trailing garbage", "/v1/xorbs/default/" + h, w, append(append([]byte{}, body...), 1, 2, 3), 400},
		{"empty", "/v1/xorbs/default/" + h, w, []byte{}, 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			expect(t, e.do("POST", tc.path, tc.token, tc.body), tc.status)
		})
	}
	// Nothing of any rejected upload is visible.
	expect(t, e.do("HEAD", "/v1/xorbs/default/"+h, w, nil), 404)
	if e.stored(ingest.XorbKey(f.layouts[0].Hash)) {
		t.Fatal("a rejected xorb left an object behind")
	}
}

func TestXorbUploadOversizedAndSlow(t *testing.T) {
	e := newEnv(t, sqliteLocal(), withPace(1<<20, 50*time.Millisecond))
	f := makeFixture(t, 4, 1, 20, 3000)
	path := "/v1/xorbs/default/" + f.layouts[0].Hash.String()
	w := e.token("s", auth.Write)
	status, body := e.rawRequest("POST", path, w, ingest.MaxXorbBody+1, nil)
	if !strings.HasPrefix(status, "413") || !strings.Contains(body, `"code"`) {
		t.Fatalf("oversized: %s %s", status, body)
	}
	// Half the body, then nothing: the pace floor (1 MiB/s over 50 ms) cuts it off.
	status, body = e.rawRequest("POST", path, w, int64(len(f.xorbs[0])), f.xorbs[0][:len(f.xorbs[0])/2])
	if !strings.HasPrefix(status, "408") || !strings.Contains(body, `"too_slow"`) {
		t.Fatalf("slow: %s %s", status, body)
	}
	expect(t, e.do("HEAD", path, w, nil), 404)
}
