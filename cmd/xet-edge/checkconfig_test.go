package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xetcdn/xetcdn/internal/testenv"
)

// TestCheckConfig: `xet-edge check-config FLAGS` loads and validates what `xet-edge FLAGS` would
// run with (file, flags, the origin token from the environment), answers 0 with a summary or 2
// with the problems one per line, and creates, opens and binds nothing (issue 14).
func TestCheckConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := testenv.Build(t, ".")
	dir := filepath.Join(t.TempDir(), "not-created")
	cfg := filepath.Join(t.TempDir(), "edge.json")
	if err := os.WriteFile(cfg, []byte(`{"origin":"http://origin:8080","listen":"0.0.0.0:8443","public_url":"https://localhost:8443"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	token := []string{"XETCDN_EDGE_ORIGIN_TOKEN=t"}
	for _, c := range []struct {
		env  []string
		args []string
		code int
		want []string // on stdout for 0, on stderr for 2
	}{
		{token, []string{"--config", cfg, "--data-dir", dir}, 0, []string{"xet-edge: configuration ok: origin http://origin:8080", `public_url "https://localhost:8443"`}},
		{token, []string{"--config", cfg, "--data-dir", dir, "--listen", "0.0.0.0:8444", "--public-url", "https://localhost:8444"}, 0,
			[]string{"listen 0.0.0.0:8444", `public_url "https://localhost:8444"`}},
		{noEnv, []string{"--config", cfg, "--data-dir", dir}, 2, []string{"xet-edge: configuration error:\n",
			"\n  --origin-token (or XETCDN_EDGE_ORIGIN_TOKEN) is required\n"}},
		{token, []string{"--config", cfg, "--data-dir", dir, "--permits", "-1"}, 2, []string{"\n  permits must not be negative\n"}},
		{token, []string{"--config", cfg, "--data-dir", dir, "--bogus"}, 2, []string{"\n  flag provided but not defined: -bogus\n"}},
	} {
		code, out, errOut := testenv.RunStatus(t, bin, c.env, append([]string{"check-config"}, c.args...)...)
		text := out
		if c.code != 0 {
			text = errOut
		}
		if code != c.code || (c.code == 0 && errOut != "") || (c.code != 0 && out != "") {
			t.Errorf("check-config %q: status %d, stdout %q, stderr %q; want %d", c.args, code, out, errOut, c.code)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(text, w) {
				t.Errorf("check-config %q: output lacks %q:\n%s", c.args, w, text)
			}
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("check-config touched --data-dir %s (%v)", dir, err)
	}
	if code, out, _ := testenv.RunStatus(t, bin, noEnv, "--help"); code != 0 || !strings.Contains(out, "xet-edge check-config") {
		t.Errorf("--help does not list check-config: %d %q", code, out)
	}
}
