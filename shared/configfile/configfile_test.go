package configfile

import (
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
