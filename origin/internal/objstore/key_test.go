package objstore

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

func TestCheckKey(t *testing.T) {
	tests := []struct {
		key string
		ok  bool
	}{
		{"xorbs/default/3f9a", true},
		{"shards/a", true},
		{"a", true},
		{"a.b-c_d/E9", true},
		{strings.Repeat("a", MaxKeyLen), true},
		{strings.Repeat("a", MaxKeyLen+1), false},
		{"", false},
		{"/a", false},
		{"a/", false},
		{"a//b", false},
		{"..", false},
		{"a/../b", false},
		{"a/./b", false},
		{".a", false},
		{"_a", false},
		{"-a", false},
		{"a/_b", false},
		{"a\\b", false},
		{"a b", false},
		{"a\x00", false},
		{"é", false},
	}
	for _, tc := range tests {
		err := CheckKey(tc.key)
		if tc.ok && err != nil {
			t.Errorf("CheckKey(%q) = %v, want nil", tc.key, err)
		}
		if !tc.ok && !errors.Is(err, ErrKey) {
			t.Errorf("CheckKey(%q) = %v, want ErrKey", tc.key, err)
		}
	}
}

func TestKeys(t *testing.T) {
	h, err := hash.Parse(strings.Repeat("0123456789abcdef", 4))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := XorbKey(h), "xorbs/default/"+h.String(); got != want {
		t.Errorf("XorbKey = %q, want %q", got, want)
	}
	if got, want := ShardKey(h), "shards/"+h.String(); got != want {
		t.Errorf("ShardKey = %q, want %q", got, want)
	}
	for _, k := range []string{XorbKey(h), ShardKey(h)} {
		if err := CheckKey(k); err != nil {
			t.Errorf("CheckKey(%q): %v", k, err)
		}
	}
}

// Every key CheckKey accepts maps to a path strictly inside the root, in a fan-out directory,
// and distinct keys map to distinct paths.
func FuzzCheckKey(f *testing.F) {
	for _, s := range []string{"xorbs/default/3f9a", "a/../b", "../x", "a//b", "_x/y", "a\\..\\b"} {
		f.Add(s, "a/b")
	}
	l := &Local{root: "/store"}
	f.Fuzz(func(t *testing.T, key, other string) {
		if CheckKey(key) != nil {
			return
		}
		p := l.path(key)
		if !strings.HasPrefix(p, "/store/") || filepath.Clean(p) != p {
			t.Fatalf("key %q maps to %q, outside the root or not clean", key, p)
		}
		if fan := filepath.Base(filepath.Dir(p)); !strings.HasPrefix(fan, "_") {
			t.Fatalf("key %q maps to %q, not in a fan-out directory", key, p)
		}
		if other != key && CheckKey(other) == nil && l.path(other) == p {
			t.Fatalf("keys %q and %q map to the same path %q", key, other, p)
		}
	})
}
