package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xetcdn/xetcdn/internal/testenv"
)

// TestCheckConfig: `xet-origin check-config FLAGS` loads and validates what `xet-origin FLAGS`
// would run with (file, flags, secrets from the environment), answers 0 with a summary or 2 with
// the problems one per line, and creates, opens and binds nothing (issue 14).
func TestCheckConfig(t *testing.T) {
	bin := buildBinary(t)
	dir := filepath.Join(t.TempDir(), "not-created")
	cfg := filepath.Join(t.TempDir(), "origin.json")
	if err := os.WriteFile(cfg, []byte(`{"listen":"127.0.0.1:1","index":{"driver":"postgres"},"objects":{"driver":"s3","endpoint":"minio:9000","bucket":"b"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	secrets := []string{"XETCDN_POSTGRES_DSN=postgres://x@127.0.0.1:1/x", "XETCDN_S3_ACCESS_KEY=a", "XETCDN_S3_SECRET_KEY=b"}
	for _, c := range []struct {
		env  []string
		args []string
		code int
		want []string // on stdout for 0, on stderr for 2
	}{
		{[]string{}, []string{"--data-dir", dir}, 0, []string{"xet-origin: configuration ok: ", "index sqlite, objects local"}},
		{secrets, []string{"--config", cfg, "--data-dir", dir}, 0, []string{"index postgres, objects s3", "listen 127.0.0.1:1"}},
		{[]string{}, []string{"--config", cfg, "--data-dir", dir}, 2, []string{"xet-origin: configuration error:\n",
			"\n  index driver postgres needs XETCDN_POSTGRES_DSN", "\n  objects driver s3 needs XETCDN_S3_ACCESS_KEY"}},
		{[]string{}, nil, 2, []string{"\n  data_dir (--data-dir) is required\n"}},
		{[]string{}, []string{"--data-dir", dir, "--lisen", "x"}, 2, []string{"\n  flag provided but not defined: -lisen\n"}},
		{[]string{}, []string{"--config", cfg + ".missing", "--data-dir", dir}, 2, []string{"origin.json.missing"}},
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
	if code, out, _ := testenv.RunStatus(t, bin, nil, "--help"); code != 0 || !strings.Contains(out, "xet-origin check-config") {
		t.Errorf("--help does not list check-config: %d %q", code, out)
	}
}
