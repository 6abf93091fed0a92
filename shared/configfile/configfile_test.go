package configfile

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type sample struct {
	Listen  string   `json:"listen"`
	Timeout Duration `json:"timeout"`
	Keep    int      `json:"keep"`
}

func TestDecode(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	v := sample{Keep: 7}
	if err := Decode(write("ok.json", `{"listen":"127.0.0.1:1","timeout":"1m30s"}`), &v); err != nil {
		t.Fatal(err)
	}
	if v.Listen != "127.0.0.1:1" || v.Timeout.D() != 90*time.Second || v.Keep != 7 {
		t.Fatalf("decoded %+v: file keys must overwrite, others keep their defaults", v)
	}
	for name, body := range map[string]string{
		"typo.json":     `{"listne":"x"}`,
		"badtime.json":  `{"timeout":"soon"}`,
		"notjson.json":  `listen = x`,
		"wrongtyp.json": `{"keep":"7"}`,
	} {
		p := write(name, body)
		if err := Decode(p, &sample{}); err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: err = %v, want an error naming the file", name, err)
		}
	}
	if err := Decode(filepath.Join(dir, "missing.json"), &sample{}); err == nil {
		t.Error("missing file: no error")
	}
	if b, _ := Duration(20 * time.Second).MarshalText(); string(b) != "20s" {
		t.Errorf("MarshalText = %q", b)
	}
}

type loadConfig struct {
	Listen  string   `json:"listen"`
	Permits int      `json:"permits"`
	Wait    Duration `json:"wait"`
	Secret  string   `json:"-"`
}

func defineLoadFlags(fs *flag.FlagSet, file *string, f *loadConfig) {
	fs.StringVar(file, "config", "", "file")
	fs.StringVar(&f.Listen, "listen", "shown-default:1", "listener")
	fs.IntVar(&f.Permits, "permits", 99, "permits")
}

// TestLoad: defaults, then the file, then only the flags given; a flag's shown default never
// replaces the file's or the defaults' value; bad flags and stray arguments wrap invalid.
func TestLoad(t *testing.T) {
	invalid := errors.New("invalid")
	dir := t.TempDir()
	file := filepath.Join(dir, "c.json")
	if err := os.WriteFile(file, []byte(`{"listen":"file:2","wait":"3s"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	defaults := loadConfig{Listen: "default:0", Permits: 7, Secret: "kept"}
	for _, c := range []struct {
		args []string
		want loadConfig
	}{
		{nil, defaults},
		{[]string{"--config", file}, loadConfig{Listen: "file:2", Permits: 7, Wait: Duration(3 * time.Second), Secret: "kept"}},
		{[]string{"--config", file, "--listen", "flag:3"}, loadConfig{Listen: "flag:3", Permits: 7, Wait: Duration(3 * time.Second), Secret: "kept"}},
		{[]string{"--listen", "flag:3", "--config", file, "--permits", "0"}, loadConfig{Listen: "flag:3", Permits: 0, Wait: Duration(3 * time.Second), Secret: "kept"}},
	} {
		got := defaults
		if err := Load("t", &got, c.args, defineLoadFlags, invalid); err != nil || got != c.want {
			t.Errorf("Load(%q) = %+v, %v; want %+v", c.args, got, err, c.want)
		}
	}
	for _, args := range [][]string{{"--nope"}, {"--permits", "x"}, {"stray"}, {"--config", filepath.Join(dir, "missing.json")}} {
		got := defaults
		if err := Load("t", &got, args, defineLoadFlags, invalid); !errors.Is(err, invalid) {
			t.Errorf("Load(%q): %v, want an error wrapping invalid", args, err)
		}
	}
	var help strings.Builder
	PrintFlags("t", &help, defineLoadFlags)
	if !strings.Contains(help.String(), "shown-default:1") || !strings.Contains(help.String(), "-permits") {
		t.Errorf("PrintFlags: %q", help.String())
	}
}
