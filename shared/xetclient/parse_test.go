package xetclient

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestReadShardStream(t *testing.T) {
	long := `{"type":"validating","pad":"` + strings.Repeat("x", maxFrameLine) + `"}` + "\n"
	for _, tc := range []struct {
		name      string
		in        string
		ok        bool
		shard     bool // a *ShardError
		transient bool
	}{
		{"result", `{"type":"validating","verified":0,"total":2}` + "\n" + `{"type":"result","result":1}` + "\n", true, false, false},
		{"heartbeats and unknown types", `{"type":"heartbeat"}` + "\n\n" + `{"type":"new"}` + "\n" + `{"type":"result"}`, true, false, false},
		{"fatal error frame", `{"type":"error","message":"bad shard"}` + "\n", false, true, false},
		{"retryable error frame", `{"type":"error","message":"busy","retryable":true}` + "\n", false, true, true},
		{"no terminal frame", `{"type":"validating","verified":1,"total":2}` + "\n", false, false, false},
		{"empty stream", "", false, false, false},
		{"malformed line", "{not json\n", false, false, false},
		{"over-long line", long + `{"type":"result"}`, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := readShardStream(strings.NewReader(tc.in))
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v", err)
			}
			var se *ShardError
			if errors.As(err, &se) != tc.shard {
				t.Errorf("ShardError: %v", err)
			}
			var te *transientError
			if errors.As(err, &te) != tc.transient {
				t.Errorf("transient: %v", err)
			}
			if !tc.ok && !tc.shard && !errors.Is(err, ErrCorrupt) {
				t.Errorf("err = %v, want ErrCorrupt", err)
			}
		})
	}
}

func FuzzReadShardStream(f *testing.F) {
	f.Add(`{"type":"validating","verified":0,"total":2}` + "\n" + `{"type":"result","result":1}` + "\n")
	f.Add(`{"type":"error","message":"x","retryable":true}`)
	f.Add(`{"type":"heartbeat"}` + "\n")
	f.Add("\n\n{")
	f.Fuzz(func(t *testing.T, in string) {
		err := readShardStream(strings.NewReader(in))
		var se *ShardError
		if err != nil && !errors.As(err, &se) && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("unclassified error %v", err)
		}
	})
}

func TestDecodeV1(t *testing.T) {
	const x = "0101010101010101020202020202020203030303030303030404040404040404"
	for _, tc := range []struct {
		name string
		in   string
		ok   bool
	}{
		{"empty file", `{"offset_into_first_range":0,"terms":[],"fetch_info":{}}`, true},
		{"one term", `{"offset_into_first_range":5,"terms":[{"hash":"` + x + `","unpacked_length":10,"range":{"start":0,"end":2}}],
			"fetch_info":{"` + x + `":[{"range":{"start":0,"end":2},"url":"http://u","url_range":{"start":0,"end":99}}]},"extra":1}`, true},
		{"missing fetch_info", `{"offset_into_first_range":0,"terms":[]}`, false},
		{"missing offset", `{"terms":[],"fetch_info":{}}`, false},
		{"uncovered term", `{"offset_into_first_range":0,"terms":[{"hash":"` + x + `","unpacked_length":10,"range":{"start":0,"end":3}}],
			"fetch_info":{"` + x + `":[{"range":{"start":0,"end":2},"url":"http://u","url_range":{"start":0,"end":99}}]}}`, false},
		{"bad hash", `{"offset_into_first_range":0,"terms":[],"fetch_info":{"zz":[]}}`, false},
		{"not json", `[`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := decodeV1([]byte(tc.in))
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v", err)
			}
			if err == nil && (a.Terms == nil || a.Xorbs == nil) {
				t.Fatal("nil terms or xorbs in a decoded answer")
			}
		})
	}
}

func FuzzDecodeV1(f *testing.F) {
	f.Add([]byte(`{"offset_into_first_range":0,"terms":[],"fetch_info":{}}`))
	f.Add([]byte(`{"offset_into_first_range":1,"terms":[{"hash":"0101010101010101020202020202020203030303030303030404040404040404","unpacked_length":1,"range":{"start":0,"end":1}}],"fetch_info":{"0101010101010101020202020202020203030303030303030404040404040404":[{"range":{"start":0,"end":1},"url":"u","url_range":{"start":0,"end":9}}]}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, in []byte) {
		a, err := decodeV1(in)
		if err != nil {
			return
		}
		// Whatever decodes must satisfy the client's rules, so planning can rely on them.
		if err := a.Validate(); err != nil {
			t.Fatalf("decoded answer fails Validate: %v", err)
		}
	})
}

func TestRetryDelay(t *testing.T) {
	p := RetryPolicy{BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}.withDefaults()
	for n, want := range []time.Duration{100, 300, 900, 1000, 1000} {
		want *= time.Millisecond
		if want > time.Second {
			want = time.Second
		}
		for i := 0; i < 20; i++ {
			if d := p.delay(n); d < want/2 || d > want {
				t.Fatalf("delay(%d) = %v, want in [%v, %v]", n, d, want/2, want)
			}
		}
	}
	if p.MaxAttempts != 6 {
		t.Errorf("default attempts %d", p.MaxAttempts)
	}
}

func TestSessionID(t *testing.T) {
	a, b := newSessionID(), newSessionID()
	if a == b || len(a) != 36 || a[14] != '7' || !strings.ContainsAny(a[19:20], "89ab") {
		t.Errorf("session ids %q %q", a, b)
	}
}
