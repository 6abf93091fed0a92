package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestEmbeddedDefaults(t *testing.T) {
	c, err := Load([]string{"--data-dir", "/d", "--listen", "127.0.0.1:9000"}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Index.Driver != IndexSQLite || c.Index.SQLitePath != "/d/index.db" || c.Objects.Driver != ObjectsLocal ||
		c.Objects.Dir != "/d/objects" || c.Auth.KeyDir != "/d/keys" || c.PublicURL != "http://127.0.0.1:9000" ||
		c.EdgeURL != c.PublicURL || c.DevNoAuth || c.Limits.PaceFloor != 4096 {
		t.Fatalf("config %+v", c)
	}
}

func TestFileFlagsEnv(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "origin.json")
	doc := `{"data_dir":"/from-file","listen":"127.0.0.1:1","public_url":"https://cas.example/",
	"index":{"driver":"postgres"},"objects":{"driver":"s3","endpoint":"127.0.0.1:9000","bucket":"b"},
	"limits":{"shard_heartbeat":"5s","pace_floor":100,"batch_files":10}}`
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load([]string{"--config", file, "--listen", "127.0.0.1:2", "--dev-no-auth"}, env(map[string]string{
		EnvPostgresDSN: "postgres://x", EnvS3AccessKey: "a", EnvS3SecretKey: "s"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.DataDir != "/from-file" || c.Listen != "127.0.0.1:2" || c.PublicURL != "https://cas.example" ||
		c.Index.PostgresDSN != "postgres://x" || c.Objects.SecretKey != "s" || !c.DevNoAuth ||
		c.Limits.ShardHeartbeat.D() != 5*time.Second || c.Limits.PaceFloor != 100 || c.Limits.BatchFiles != 10 ||
		c.Limits.BatchTerms != Default().Limits.BatchTerms {
		t.Fatalf("config %+v", c)
	}
}

func TestValidateReportsEverything(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "bad.json")
	doc := `{"listen":"nope","index":{"driver":"mysql"},"objects":{"driver":"s3"},
	"limits":{"shard_heartbeat":"-1s","recon_permits":0,"batch_terms":0,"batch_body":10}}`
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load([]string{"--config", file}, env(nil))
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{"data_dir", "listen", "index.driver", "objects driver s3 needs objects.endpoint",
		"XETCDN_S3_ACCESS_KEY", "limits.shard_heartbeat", "recon_permits", "limits.batch_terms", "limits.batch_body"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}
}

func TestLoadRejects(t *testing.T) {
	dir := t.TempDir()
	unknown := filepath.Join(dir, "unknown.json")
	os.WriteFile(unknown, []byte(`{"data_dir":"/d","no_such_key":1}`), 0o600)
	secret := filepath.Join(dir, "secret.json")
	os.WriteFile(secret, []byte(`{"data_dir":"/d","index":{"driver":"postgres","PostgresDSN":"x"}}`), 0o600)
	tests := map[string][]string{
		"unknown key":         {"--config", unknown},
		"secret in file":      {"--config", secret},
		"missing file":        {"--config", filepath.Join(dir, "absent.json")},
		"unknown flag":        {"--data-dir", "/d", "--bogus"},
		"stray argument":      {"--data-dir", "/d", "extra"},
		"same admin and main": {"--data-dir", "/d", "--admin-listen", "127.0.0.1:8080"},
		"bad public url":      {"--data-dir", "/d", "--public-url", "ftp://x"},
	}
	for name, args := range tests {
		if _, err := Load(args, env(nil)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

func FuzzLoadFile(f *testing.F) {
	f.Add([]byte(`{"data_dir":"/d"}`))
	f.Add([]byte(`{"data_dir":"/d","index":{"driver":"postgres"},"limits":{"pace_window":"1s"}}`))
	f.Add([]byte(`{"limits":{"pace_window":"forever"}}`))
	f.Add([]byte(`[]`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, doc []byte) {
		file := filepath.Join(dir, "c.json")
		if err := os.WriteFile(file, doc, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Load([]string{"--config", file}, env(nil))
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("error %v does not wrap ErrInvalid", err)
		}
		if err == nil && c.Validate() != nil {
			t.Fatal("Load returned a config that does not validate")
		}
	})
}

// TestAdminListenDefaultsToLoopback: an admin address without a host binds loopback, from the
// flag or the file; a named host is kept.
func TestAdminListenDefaultsToLoopback(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.json")
	if err := os.WriteFile(file, []byte(`{"admin_listen": ":9090"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--admin-listen", ":9090"}, "127.0.0.1:9090"},
		{[]string{"--config", file}, "127.0.0.1:9090"},
		{[]string{"--admin-listen", "0.0.0.0:9090"}, "0.0.0.0:9090"},
		{nil, ""},
	} {
		c, err := Load(append([]string{"--data-dir", "/d"}, tc.args...), func(string) string { return "" })
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if c.AdminListen != tc.want {
			t.Errorf("%q: admin listen %q, want %q", tc.args, c.AdminListen, tc.want)
		}
	}
}

// TestBoundedWaitingLimits: the admission and connection limits have their documented
// defaults, load from the file, and are validated.
func TestBoundedWaitingLimits(t *testing.T) {
	d := Default().Limits
	if d.IngestWait.D() != 5*time.Second || d.UploadsPerScope != 16 || d.UploadBodyTimeout.D() != 20*time.Minute ||
		d.MaxConnections != 4096 || d.MaxConnectionsPerIP != 0 || d.WriteProgress.D() != time.Minute ||
		d.IdleTimeout.D() != 2*time.Minute || d.ReadHeaderTimeout.D() != 30*time.Second {
		t.Errorf("defaults %+v", d)
	}
	dir := t.TempDir()
	load := func(limits string) (*Config, error) {
		file := filepath.Join(dir, "c.json")
		if err := os.WriteFile(file, []byte(`{"limits":`+limits+`}`), 0o600); err != nil {
			t.Fatal(err)
		}
		return Load([]string{"--data-dir", dir, "--config", file}, env(nil))
	}
	c, err := load(`{"ingest_wait":"1s","uploads_per_scope":2,"upload_body_timeout":"30s","max_connections":10,
		"max_connections_per_ip":3,"write_progress":"2s","idle_timeout":"3s","read_header_timeout":"4s"}`)
	if err != nil {
		t.Fatal(err)
	}
	if l := c.Limits; l.IngestWait.D() != time.Second || l.UploadsPerScope != 2 || l.UploadBodyTimeout.D() != 30*time.Second ||
		l.MaxConnections != 10 || l.MaxConnectionsPerIP != 3 || l.WriteProgress.D() != 2*time.Second ||
		l.IdleTimeout.D() != 3*time.Second || l.ReadHeaderTimeout.D() != 4*time.Second {
		t.Errorf("loaded %+v", l)
	}
	_, err = load(`{"ingest_wait":"0s","uploads_per_scope":0,"upload_body_timeout":"-1s","max_connections":0,
		"max_connections_per_ip":-1,"write_progress":"0s","idle_timeout":"0s","read_header_timeout":"0s"}`)
	for _, want := range []string{"limits.ingest_wait", "limits.uploads_per_scope", "limits.upload_body_timeout",
		"limits.max_connections must", "limits.max_connections_per_ip", "limits.write_progress", "limits.idle_timeout",
		"limits.read_header_timeout"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s: %v", want, err)
		}
	}
}

// TestGCPercentAndMemoryLimit: gc_percent 0 is the origin's default, -1 leaves the runtime's own,
// below -1 is refused; memory_limit 0 is the memory budget (layout cache + ingest memory +
// working set), negative none, a positive value below 256 MiB refused.
func TestGCPercentAndMemoryLimit(t *testing.T) {
	load := func(js string) (*Config, error) {
		file := filepath.Join(t.TempDir(), "c.json")
		os.WriteFile(file, []byte(js), 0o644)
		return Load([]string{"--data-dir", "/d", "--config", file}, env(nil))
	}
	for js, want := range map[string]int{`{}`: DefaultGCPercent, `{"limits": {"gc_percent": -1}}`: 0, `{"limits": {"gc_percent": 150}}`: 150} {
		if c, err := load(js); err != nil || c.GCPercent() != want {
			t.Errorf("%s: %v, want gc percent %d", js, err, want)
		}
	}
	if _, err := load(`{"limits": {"gc_percent": -2}}`); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "gc_percent") {
		t.Errorf("gc_percent -2: %v, want refused", err)
	}
	for js, want := range map[string]int64{
		`{}`: 256<<20 + 512<<20 + WorkingSetBytes,
		`{"index": {"layout_cache": 0}, "limits": {"ingest_memory": 268435456}}`: 256<<20 + WorkingSetBytes,
		`{"limits": {"memory_limit": -1}}`:                                       -1,
		`{"limits": {"memory_limit": 4294967296}}`:                               4 << 30,
	} {
		if c, err := load(js); err != nil || c.MemoryLimit() != want {
			t.Errorf("%s: %v, want memory limit %d", js, err, want)
		}
	}
	if _, err := load(`{"limits": {"memory_limit": 1048576}}`); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "memory_limit") {
		t.Errorf("memory_limit 1 MiB: %v, want refused", err)
	}
}
