package opscheck

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/xetcdn/xetcdn/edge"
	"github.com/xetcdn/xetcdn/origin"
)

// pathKeys are the configuration keys holding absolute paths. relocateConfig moves them under a
// temporary root so that loading an example never touches /var or /etc.
var pathKeys = [][]string{
	{"data_dir"}, {"index", "sqlite_path"}, {"objects", "dir"}, {"auth", "key_dir"},
	{"cache", "data_dir"}, {"tls", "cert_file"}, {"tls", "key_file"},
}

// relocateConfig writes a copy of the JSON configuration src under root, with every path value
// prefixed by root, and returns the copy's name. Keys and all other values are kept as they are
// (numbers verbatim), so unknown or mistyped keys still reach the loader.
func relocateConfig(t *testing.T, src, root string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	for _, k := range pathKeys {
		obj := m
		for _, part := range k[:len(k)-1] {
			obj, _ = obj[part].(map[string]any)
		}
		if p, ok := obj[k[len(k)-1]].(string); ok && filepath.IsAbs(p) {
			obj[k[len(k)-1]] = filepath.Join(root, p)
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(root, filepath.Base(src))
	if err := os.WriteFile(dst, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return dst
}

// isConfigError reports whether err is one of the configuration loaders' errors. Both tiers'
// loaders wrap every problem in a sentinel reading "config: invalid"; the packages are internal
// to their tier, so the sentinel is recognised by its text.
func isConfigError(err error) bool {
	if err == nil {
		return false
	}
	if err.Error() == "config: invalid" {
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return isConfigError(u.Unwrap())
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if isConfigError(e) {
				return true
			}
		}
	}
	return false
}

// fakeEnv supplies every secret either binary reads, so that a configuration naming Postgres,
// S3 or an origin token passes validation.
func fakeEnv(name string) string {
	return map[string]string{
		"XETCDN_POSTGRES_DSN":      "postgres://xet@127.0.0.1:1/xet?sslmode=disable",
		"XETCDN_S3_ACCESS_KEY":     "access",
		"XETCDN_S3_SECRET_KEY":     "secret",
		"XETCDN_EDGE_ORIGIN_TOKEN": "edge-token",
	}[name]
}

// loadArgs runs a binary's command line (without the program name) through the binary's own
// entry point with an already cancelled context: the configuration loader runs in full (file,
// flags, environment, Validate), and whatever follows stops at once without reaching the
// network. Listeners are moved to free loopback ports, the --config file and --data-dir under
// root. It returns the loader's verdict: an error only for configuration problems.
func loadArgs(t *testing.T, tier string, args []string, root string) error {
	t.Helper()
	var a []string
	for i := 0; i < len(args); i++ {
		a = append(a, args[i])
		if i+1 == len(args) {
			break
		}
		switch args[i] {
		case "--config":
			i++
			a = append(a, relocateConfig(t, args[i], root))
		case "--data-dir":
			i++
			a = append(a, filepath.Join(root, args[i]))
		}
	}
	a = append(a, "--listen", freeAddr(t), "--admin-listen", freeAddr(t))
	if tier == "edge" {
		a = append(a, "--http-listen", freeAddr(t))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	var err error
	switch tier {
	case "origin":
		err = origin.Run(ctx, a, fakeEnv, log, prometheus.NewRegistry())
	case "edge":
		var e *edge.Edge
		if e, err = edge.Start(ctx, a, fakeEnv, log, prometheus.NewRegistry()); err == nil {
			err = e.Wait()
		}
	default:
		t.Fatalf("unknown tier %q", tier)
	}
	if isConfigError(err) {
		return err
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		// Loaded; stopped later (a TLS file or a database that exists only in production).
		t.Logf("%s %q: configuration loaded; then: %v", tier, args, err)
	}
	return nil
}

// tierOf names the binary a config file or command belongs to.
func tierOf(name string) string {
	if strings.Contains(filepath.Base(name), "edge") {
		return "edge"
	}
	return "origin"
}

// TestExampleConfigsLoad loads every example configuration under deploy/ through the real
// loader of its binary.
func TestExampleConfigsLoad(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(repoRoot, "deploy/*/*.json"))
	if len(files) < 3 {
		t.Fatalf("found %d example configurations, want the origin's, the embedded origin's and the edge's", len(files))
	}
	for _, f := range files {
		t.Run(rel(f), func(t *testing.T) {
			if err := loadArgs(t, tierOf(f), []string{"--config", f}, t.TempDir()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestLoaderRejectsTypos shows that the check above can fail: a misspelt key is refused.
func TestLoaderRejectsTypos(t *testing.T) {
	for _, tc := range []struct{ tier, body string }{
		{"origin", `{"data_dir":"/x","lisen":"127.0.0.1:1"}`},
		{"origin", `{"data_dir":"/x","limits":{"ingest_memory":1}}`},
		{"edge", `{"origin":"http://o","data_dir":"/x","cache":{"data_byte":1}}`},
	} {
		root := t.TempDir()
		f := filepath.Join(t.TempDir(), tc.tier+"-typo.json")
		if err := os.WriteFile(f, []byte(tc.body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := loadArgs(t, tc.tier, []string{"--config", f}, root); err == nil {
			t.Errorf("%s config %s loaded; want a configuration error", tc.tier, tc.body)
		}
	}
}

// command is a binary's command line found in a deployment file, and the grace the platform
// gives the process to stop after SIGTERM.
type command struct {
	where string
	tier  string
	args  []string
	stop  time.Duration
}

// TestDeployCommandsLoad checks every command line in the systemd units, the compose file and
// the Kubernetes manifests: its flags and the configuration it names load, and the platform
// waits longer than the configuration's drain (limits.shutdown_grace) before killing it.
func TestDeployCommandsLoad(t *testing.T) {
	var cmds []command
	cmds = append(cmds, systemdCommands(t)...)
	cmds = append(cmds, composeCommands(t)...)
	cmds = append(cmds, kubernetesCommands(t)...)
	tiers := map[string]int{}
	for _, c := range cmds {
		tiers[c.where[:strings.Index(c.where, "/")]+" "+c.tier]++
	}
	for _, want := range []string{"systemd origin", "systemd edge", "compose origin", "compose edge",
		"kubernetes origin", "kubernetes edge"} {
		if tiers[want] == 0 {
			t.Errorf("no %s command found", want)
		}
	}
	for _, c := range cmds {
		t.Run(c.where, func(t *testing.T) {
			if err := loadArgs(t, c.tier, c.args, t.TempDir()); err != nil {
				t.Fatal(err)
			}
			grace := shutdownGrace(t, c.args)
			if c.stop <= grace {
				t.Errorf("the platform stops the process after %v, not longer than its drain (%v)", c.stop, grace)
			}
		})
	}
}

// shutdownGrace is limits.shutdown_grace of the --config file in args (30s by default).
func shutdownGrace(t *testing.T, args []string) time.Duration {
	grace := 30 * time.Second
	for i, a := range args {
		if a != "--config" || i+1 == len(args) {
			continue
		}
		b, err := os.ReadFile(args[i+1])
		if err != nil {
			t.Fatal(err)
		}
		var c struct {
			Limits struct {
				ShutdownGrace string `json:"shutdown_grace"`
			} `json:"limits"`
		}
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatal(err)
		}
		if c.Limits.ShutdownGrace != "" {
			if grace, err = time.ParseDuration(c.Limits.ShutdownGrace); err != nil {
				t.Fatal(err)
			}
		}
	}
	return grace
}

// mapConfig replaces the --config path of args (where the file is installed) with the example
// file it is installed from, looked up by base name in dirs.
func mapConfig(t *testing.T, args []string, dirs ...string) []string {
	t.Helper()
	out := slices.Clone(args)
	for i := range out {
		if out[i] != "--config" || i+1 == len(out) {
			continue
		}
		base, found := filepath.Base(out[i+1]), false
		for _, d := range dirs {
			if _, err := os.Stat(filepath.Join(d, base)); err == nil {
				out[i+1], found = filepath.Join(d, base), true
				break
			}
		}
		if !found {
			t.Fatalf("--config %s: no example file %s in %q", args[i+1], base, dirs)
		}
	}
	return out
}

// systemdCommands reads ExecStart and TimeoutStopSec of every unit, and checks the hardening
// every unit must have.
func systemdCommands(t *testing.T) []command {
	units, _ := filepath.Glob(filepath.Join(repoRoot, "deploy/systemd/*.service"))
	var out []command
	for _, u := range units {
		f, err := os.Open(u)
		if err != nil {
			t.Fatal(err)
		}
		kv := map[string]string{}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
				kv[k] = v
			}
		}
		f.Close()
		for _, k := range []string{"ProtectSystem", "StateDirectory", "LimitNOFILE", "Restart", "TimeoutStopSec", "NoNewPrivileges"} {
			if kv[k] == "" {
				t.Errorf("%s: no %s=", rel(u), k)
			}
		}
		if kv["ProtectSystem"] != "strict" || kv["Restart"] != "on-failure" || (kv["DynamicUser"] != "yes" && kv["User"] == "") {
			t.Errorf("%s: want ProtectSystem=strict, Restart=on-failure and DynamicUser=yes or a User", rel(u))
		}
		stop, err := time.ParseDuration(kv["TimeoutStopSec"])
		if err != nil {
			t.Errorf("%s: TimeoutStopSec: %v", rel(u), err)
		}
		exec := strings.Fields(kv["ExecStart"])
		if len(exec) < 2 {
			t.Errorf("%s: no ExecStart command line", rel(u))
			continue
		}
		if !strings.HasSuffix(kv["StateDirectory"], strings.TrimSuffix(filepath.Base(u), ".service")) {
			t.Errorf("%s: StateDirectory %q is not named after the unit", rel(u), kv["StateDirectory"])
		}
		args := mapConfig(t, exec[1:], filepath.Join(repoRoot, "deploy/config"))
		out = append(out, command{where: "systemd/" + filepath.Base(u), tier: tierOf(exec[0]), args: args, stop: stop})
	}
	return out
}

// composeCommands reads the origin and edge services of the compose file.
func composeCommands(t *testing.T) []command {
	dir := filepath.Join(repoRoot, "deploy/compose")
	b, err := os.ReadFile(filepath.Join(dir, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Entrypoint  []string          `yaml:"entrypoint"`
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
			StopGrace   string            `yaml:"stop_grace_period"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	for _, need := range []string{"origin", "postgres", "minio"} { // the edges: TestCompose
		if _, ok := doc.Services[need]; !ok {
			t.Errorf("compose.yaml: no %s service", need)
		}
	}
	var out []command
	for name, s := range doc.Services {
		if len(s.Entrypoint) != 1 || !strings.HasPrefix(filepath.Base(s.Entrypoint[0]), "xet-") {
			continue
		}
		stop, err := time.ParseDuration(s.StopGrace)
		if err != nil {
			t.Errorf("compose.yaml: service %s: stop_grace_period: %v", name, err)
		}
		out = append(out, command{where: "compose/" + name, tier: tierOf(s.Entrypoint[0]),
			args: mapConfig(t, s.Command, dir), stop: stop})
	}
	return out
}

// k8sObject is the part of a Kubernetes object the checks read.
type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec struct {
		Selector yaml.Node `yaml:"selector"`
		Template struct {
			Spec struct {
				TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
				Containers                    []struct {
					Name    string   `yaml:"name"`
					Command []string `yaml:"command"`
					Args    []string `yaml:"args"`
					Ports   []struct {
						Name          string `yaml:"name"`
						ContainerPort int    `yaml:"containerPort"`
						Protocol      string `yaml:"protocol"`
					} `yaml:"ports"`
					ReadinessProbe *struct {
						HTTPGet struct {
							Path string `yaml:"path"`
						} `yaml:"httpGet"`
					} `yaml:"readinessProbe"`
					LivenessProbe *struct {
						HTTPGet struct {
							Path string `yaml:"path"`
						} `yaml:"httpGet"`
					} `yaml:"livenessProbe"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

// kubernetesCommands reads every manifest, writes the ConfigMaps' files to a temporary
// directory (the containers' --config names them), checks probes, ports and disruption
// budgets, and returns the workloads' command lines.
func kubernetesCommands(t *testing.T) []command {
	files, _ := filepath.Glob(filepath.Join(repoRoot, "deploy/kubernetes/*.yaml"))
	cmDir := t.TempDir()
	var objs []k8sObject
	for _, f := range files {
		r, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(r)
		for {
			var o k8sObject
			if err := dec.Decode(&o); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", rel(f), err)
			}
			objs = append(objs, o)
		}
		r.Close()
	}
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.Kind]++
		if o.Kind == "ConfigMap" {
			for name, body := range o.Data {
				if err := os.WriteFile(filepath.Join(cmDir, name), []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if kinds["PodDisruptionBudget"] < 2 || kinds["Secret"] < 1 || kinds["Service"] < 2 {
		t.Errorf("kubernetes: want a PodDisruptionBudget per workload, Services and a Secret; have %v", kinds)
	}
	var out []command
	for _, o := range objs {
		if o.Kind != "Deployment" && o.Kind != "DaemonSet" {
			continue
		}
		for _, c := range o.Spec.Template.Spec.Containers {
			where := "kubernetes/" + o.Metadata.Name + "/" + c.Name
			if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" ||
				c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
				t.Errorf("%s: want readiness on /readyz and liveness on /healthz", where)
			}
			if len(c.Command) != 1 {
				t.Errorf("%s: want the binary as the only command word", where)
				continue
			}
			tier := tierOf(c.Command[0])
			if tier == "edge" {
				protos := map[int]string{}
				for _, p := range c.Ports {
					protos[p.ContainerPort] += p.Protocol
				}
				if !slicesContainsBoth(protos) {
					t.Errorf("%s: want one container port open on both TCP and UDP (HTTP/3)", where)
				}
			}
			out = append(out, command{where: where, tier: tier, args: mapConfig(t, c.Args, cmDir),
				stop: time.Duration(o.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second})
		}
	}
	return out
}

func slicesContainsBoth(protos map[int]string) bool {
	for _, p := range protos {
		if strings.Contains(p, "TCP") && strings.Contains(p, "UDP") {
			return true
		}
	}
	return false
}
