package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoad(t *testing.T) {
	base := []string{"--origin", "http://o:8080", "--origin-token", "tok", "--data-dir", "/d", "--listen", "127.0.0.1:8443"}
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	c, err := Load(base, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Permits != 64 || c.Cache.DataDir != "/d/xorbs" || c.Auth.KeyDir != "/d/keys" || c.PublicURL != "" {
		t.Errorf("defaults: %+v", c)
	}
	file := filepath.Join(t.TempDir(), "c.json")
	os.WriteFile(file, []byte(`{"permits": 3, "limits": {"origin_timeout": "2s"}}`), 0o644)
	c, err = Load(append(base, "--config", file, "--permits", "0"), env(nil))
	if err != nil || c.Permits != 0 || c.Limits.OriginTimeout.D().Seconds() != 2 {
		t.Errorf("file + flag: %+v %v", c, err)
	}
	c, err = Load([]string{"--origin", "http://o", "--data-dir", "/d"}, env(map[string]string{EnvOriginToken: "secret"}))
	if err != nil || c.OriginToken != "secret" {
		t.Errorf("token from env: %v", err)
	}
}

func TestValidateReportsEverything(t *testing.T) {
	_, err := Load([]string{"--origin", "ftp://x", "--listen", "nope", "--permits", "-1"}, func(string) string { return "" })
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("err %v", err)
	}
	for _, want := range []string{"data_dir", "origin-token", "origin", "listen", "permits"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s: %v", want, err)
		}
	}
	file := filepath.Join(t.TempDir(), "c.json")
	os.WriteFile(file, []byte(`{"nope": 1}`), 0o644)
	if _, err := Load([]string{"--config", file}, func(string) string { return "" }); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown key: %v", err)
	}
}

// TestAdminListenDefaultsToLoopback: an admin address without a host binds loopback; a named
// host is kept.
func TestAdminListenDefaultsToLoopback(t *testing.T) {
	base := []string{"--origin", "http://o:8080", "--origin-token", "tok", "--data-dir", "/d"}
	for in, want := range map[string]string{":9091": "127.0.0.1:9091", "0.0.0.0:9091": "0.0.0.0:9091",
		"[::1]:9091": "[::1]:9091", "": ""} {
		c, err := Load(append(base, "--admin-listen", in), func(string) string { return "" })
		if err != nil {
			t.Fatalf("--admin-listen %q: %v", in, err)
		}
		if c.AdminListen != want {
			t.Errorf("--admin-listen %q: %q, want %q", in, c.AdminListen, want)
		}
	}
}

// TestConnectionLimits: the connection limits have their documented defaults, load from the
// file, and are validated.
func TestConnectionLimits(t *testing.T) {
	d := Default().Limits
	if d.MaxConnections != 10000 || d.MaxConnectionsPerIP != 0 || d.WriteProgress.D() != time.Minute ||
		d.IdleTimeout.D() != 2*time.Minute || d.ReadHeaderTimeout.D() != 30*time.Second || d.MaxStreams != 250 {
		t.Errorf("defaults %+v", d)
	}
	file := filepath.Join(t.TempDir(), "c.json")
	load := func(limits string) (*Config, error) {
		if err := os.WriteFile(file, []byte(`{"limits":`+limits+`}`), 0o600); err != nil {
			t.Fatal(err)
		}
		return Load([]string{"--origin", "http://o:8080", "--origin-token", "t", "--data-dir", t.TempDir(),
			"--config", file}, func(string) string { return "" })
	}
	c, err := load(`{"max_connections":10,"max_connections_per_ip":3,"write_progress":"2s","idle_timeout":"3s",
		"read_header_timeout":"4s","max_streams":7}`)
	if err != nil {
		t.Fatal(err)
	}
	if l := c.Limits; l.MaxConnections != 10 || l.MaxConnectionsPerIP != 3 || l.WriteProgress.D() != 2*time.Second ||
		l.IdleTimeout.D() != 3*time.Second || l.ReadHeaderTimeout.D() != 4*time.Second || l.MaxStreams != 7 {
		t.Errorf("loaded %+v", l)
	}
	_, err = load(`{"max_connections":2,"max_connections_per_ip":3,"write_progress":"0s","idle_timeout":"-1s",
		"read_header_timeout":"0s","max_streams":0}`)
	for _, want := range []string{"limits.max_connections_per_ip", "limits.write_progress", "limits.idle_timeout",
		"limits.read_header_timeout", "limits.max_streams"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s: %v", want, err)
		}
	}
}

// TestRegionAndOrigins: the region must be a region name; several origins are checked one by
// one, the bad one named.
func TestRegionAndOrigins(t *testing.T) {
	base := []string{"--data-dir", t.TempDir(), "--origin-token", "t"}
	c, err := Load(append(base, "--origin", "http://a:1,https://b:2/"), func(string) string { return "" })
	if err != nil || c.Region != "default" || !c.Register {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
	for _, bad := range [][]string{
		{"--origin", "http://a:1", "--region", "EU West"},
		{"--origin", "http://a:1", "--region", ""},
		{"--origin", "http://a:1,ftp://b"},
		{"--origin", "http://a:1,"},
	} {
		_, err := Load(append(append([]string{}, base...), bad...), func(string) string { return "" })
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: err %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := Load(append(base, "--origin", "http://a:1,ftp://b"), func(string) string { return "" }); err == nil ||
		!strings.Contains(err.Error(), `"ftp://b"`) {
		t.Errorf("bad second origin not named: %v", err)
	}
}

// TestVisibilityRefreshAhead: the default is a sixth of the TTL (also for a short TTL, which
// stays valid), negative turns it off, and a value not below the TTL is refused.
func TestVisibilityRefreshAhead(t *testing.T) {
	base := []string{"--origin", "http://o:8080", "--origin-token", "tok", "--data-dir", "/d"}
	load := func(js string) (*Config, error) {
		file := filepath.Join(t.TempDir(), "c.json")
		os.WriteFile(file, []byte(js), 0o644)
		return Load(append(base, "--config", file), func(string) string { return "" })
	}
	for js, want := range map[string]time.Duration{
		`{}`:                                  5 * time.Second,
		`{"cache": {"visibility_ttl": "3s"}}`: 500 * time.Millisecond,
		`{"cache": {"visibility_refresh_ahead": "-1s"}}`:                        0,
		`{"cache": {"visibility_refresh_ahead": "12s"}}`:                        12 * time.Second,
		`{"cache": {"visibility_ttl": "1m", "visibility_refresh_ahead": "0s"}}`: 10 * time.Second,
	} {
		c, err := load(js)
		if err != nil {
			t.Errorf("%s: %v", js, err)
		} else if c.RefreshAhead() != want {
			t.Errorf("%s: refresh-ahead %v, want %v", js, c.RefreshAhead(), want)
		}
	}
	if _, err := load(`{"cache": {"visibility_refresh_ahead": "30s"}}`); !errors.Is(err, ErrInvalid) ||
		!strings.Contains(err.Error(), "visibility_refresh_ahead") {
		t.Errorf("refresh-ahead of the whole TTL: %v, want refused", err)
	}
}

// TestGCPercent: 0 is the edge's default, -1 leaves the runtime's own, below -1 is refused.
func TestGCPercent(t *testing.T) {
	base := []string{"--origin", "http://o:8080", "--origin-token", "tok", "--data-dir", "/d"}
	load := func(js string) (*Config, error) {
		file := filepath.Join(t.TempDir(), "c.json")
		os.WriteFile(file, []byte(js), 0o644)
		return Load(append(base, "--config", file), func(string) string { return "" })
	}
	for js, want := range map[string]int{`{}`: DefaultGCPercent, `{"limits": {"gc_percent": -1}}`: 0, `{"limits": {"gc_percent": 150}}`: 150} {
		if c, err := load(js); err != nil || c.GCPercent() != want {
			t.Errorf("%s: %v, want %d", js, err, want)
		}
	}
	if _, err := load(`{"limits": {"gc_percent": -2}}`); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "gc_percent") {
		t.Errorf("gc_percent -2: %v, want refused", err)
	}
}
