package opscheck

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/xetcdn/xetcdn/internal/testenv"
)

// The compose file cannot be run here (no Docker daemon in CI), so TestCompose checks what a
// `docker compose up` depends on and can be checked without one (issue 14).

// composeService is the part of a compose service the checks read (after YAML merge keys).
type composeService struct {
	Image       string            `yaml:"image"`
	User        string            `yaml:"user"`
	Entrypoint  []string          `yaml:"entrypoint"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
}

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

// readCompose decodes deploy/compose/compose.yaml twice: into services (merge keys applied)
// and as a node tree (to see which services merge which anchor).
func readCompose(t *testing.T) (composeFile, *yaml.Node) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy/compose/compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	var n yaml.Node
	if err := yaml.Unmarshal(b, &n); err != nil {
		t.Fatal(err)
	}
	return c, &n
}

// dockerfile returns the tag the Dockerfile's build comment gives the image and its USER.
func dockerfile(t *testing.T) (tag, user string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy/docker/Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^#\s+docker build .*-t (\S+) `).FindSubmatch(b)
	u := regexp.MustCompile(`(?m)^USER (\S+)\s*$`).FindSubmatch(b)
	if m == nil || u == nil {
		t.Fatalf("Dockerfile: no `docker build -t TAG` comment or no USER line")
	}
	return string(m[1]), string(u[1])
}

// mergedAnchor returns the anchor a service mapping merges with `<<: *name`, or "".
func mergedAnchor(svc *yaml.Node) string {
	for i := 0; i+1 < len(svc.Content); i += 2 {
		if svc.Content[i].Value == "<<" && svc.Content[i+1].Kind == yaml.AliasNode {
			return svc.Content[i+1].Value
		}
	}
	return ""
}

func mapValue(m *yaml.Node, key string) *yaml.Node {
	if m.Kind == yaml.DocumentNode && len(m.Content) > 0 {
		m = m.Content[0]
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// flagValue is the value of --name in args, or "".
func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == "--"+name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// interpolate expands compose's ${NAME}, ${NAME:-default} and $NAME in s, taking NAME from env
// (what the documented steps export before `docker compose up`).
func interpolate(s string, env map[string]string) string {
	re := regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)`)
	return re.ReplaceAllStringFunc(s, func(m string) string {
		p := re.FindStringSubmatch(m)
		name := p[1] + p[3]
		if v := env[name]; v != "" {
			return v
		}
		return p[2]
	})
}

// TestCompose: deploy/compose/compose.yaml parses; the image tag agrees with the Dockerfile and the
// Kubernetes manifests; there are two or more edges, all from one definition (a YAML anchor),
// each with its own TLS port (the same on the host, TCP and UDP, and in its public URL), volume
// and admin port; every named volume an xetcdn service writes is handed to the image's uid by a
// one-shot job the service waits for; no job creates the bucket (the origin does); and every
// xetcdn service's command line, with the environment compose gives it, passes the binary's own
// `check-config` (flags, config keys and values, secrets); so does every command line of the
// systemd units and the Kubernetes manifests.
func TestCompose(t *testing.T) {
	c, root := readCompose(t)
	tag, user := dockerfile(t)
	if v := mapValue(root, "x-xetcdn-image"); v == nil || v.Value != tag {
		t.Errorf("compose.yaml: x-xetcdn-image is not %q, the Dockerfile's tag", tag)
	}
	k8s, _ := filepath.Glob(filepath.Join(repoRoot, "deploy/kubernetes/*.yaml"))
	for _, f := range k8s {
		b, _ := os.ReadFile(f)
		for _, m := range regexp.MustCompile(`(?m)^\s+image:\s*(\S+)`).FindAllSubmatch(b, -1) {
			if string(m[1]) != tag {
				t.Errorf("%s: image %s, the Dockerfile builds %s", rel(f), m[1], tag)
			}
		}
	}

	services := mapValue(root, "services")
	edgeAnchors := map[string]bool{}
	var edges []string
	ours := map[string]composeService{}
	for name, s := range c.Services {
		if strings.Contains(s.Image, "minio/mc") || strings.Contains(strings.Join(s.Command, " "), "mc mb") {
			t.Errorf("compose service %s creates the bucket: the origin does that itself", name)
		}
		if s.Image != tag {
			continue
		}
		ours[name] = s
		if len(s.Entrypoint) == 1 && filepath.Base(s.Entrypoint[0]) == "xet-edge" {
			edges = append(edges, name)
			edgeAnchors[mergedAnchor(mapValue(services, name))] = true
		}
	}
	slices.Sort(edges)
	if len(edges) < 2 {
		t.Errorf("compose.yaml: edges %q, want two or more", edges)
	}
	if len(edgeAnchors) != 1 || edgeAnchors[""] {
		t.Errorf("compose.yaml: the edges merge anchors %v, want all one definition (<<: *anchor)", edgeAnchors)
	}

	// Each edge: its own TLS port, published as itself on TCP and UDP and named by its public
	// URL (clients go where Alt-Svc says: the bound port); its own volume; its own admin port.
	seen := map[string]string{}
	unique := func(what, v, svc string) {
		if other, dup := seen[what+v]; dup {
			t.Errorf("compose: edges %s and %s share %s %s", other, svc, what, v)
		}
		seen[what+v] = svc
	}
	for _, name := range edges {
		s := c.Services[name]
		listen := flagValue(s.Command, "listen")
		if listen == "" {
			listen = configValue(t, s, "listen")
		}
		_, port, _ := strings.Cut(listen, ":")
		pub, err := url.Parse(cmpOr(flagValue(s.Command, "public-url"), configValue(t, s, "public_url")))
		if err != nil || pub.Port() != port {
			t.Errorf("compose service %s: listens on %q, public URL %v: want the same port", name, listen, pub)
		}
		for _, proto := range []string{"tcp", "udp"} {
			if !slices.Contains(s.Ports, port+":"+port+"/"+proto) {
				t.Errorf("compose service %s: no %s:%s/%s in ports %q", name, port, port, proto, s.Ports)
			}
		}
		unique("TLS port", port, name)
		for _, p := range s.Ports {
			if strings.HasPrefix(p, "127.0.0.1:") {
				unique("admin port", strings.Split(p, ":")[1], name)
			}
		}
		for _, v := range s.Volumes {
			if src, dst, _ := strings.Cut(v, ":"); dst == "/var/lib/xet-edge" {
				unique("volume", src, name)
			}
		}
	}

	// Named volumes the servers (uid from the Dockerfile) write: chowned by a job they wait for.
	chowned := map[string]string{} // volume -> job
	for name, s := range c.Services {
		if len(s.Command) < 3 || s.Command[0] != "chown" {
			continue
		}
		owner := s.Command[1]
		if owner == "-R" {
			owner = s.Command[2]
		}
		if owner != user || s.User != "0:0" {
			t.Errorf("compose job %s: chown to %s as user %q; want %s (the Dockerfile's USER) as root", name, owner, s.User, user)
		}
		for _, v := range s.Volumes {
			src, dst, _ := strings.Cut(v, ":")
			if slices.Contains(s.Command, dst) {
				chowned[src] = name
			}
		}
	}
	for name, s := range ours {
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/") || strings.HasSuffix(v, ":ro") {
				continue // a read-only bind mount
			}
			if _, declared := c.Volumes[src]; !declared {
				t.Errorf("compose service %s: volume %s is not declared", name, src)
			}
			job, ok := chowned[src]
			if !ok {
				t.Errorf("compose service %s: volume %s is not handed to uid %s by any job", name, src, user)
				continue
			}
			if s.DependsOn[job].Condition != "service_completed_successfully" {
				t.Errorf("compose service %s: does not wait for %s (service_completed_successfully) before writing %s", name, job, src)
			}
		}
	}

	// Every xetcdn server's command line through its binary's check-config, with compose's
	// environment (interpolated with what the documented steps export).
	bins := map[string]string{
		"xet-origin": testenv.Build(t, "github.com/xetcdn/xetcdn/cmd/xet-origin"),
		"xet-edge":   testenv.Build(t, "github.com/xetcdn/xetcdn/cmd/xet-edge"),
	}
	t.Run("deploy commands check-config", func(t *testing.T) { deployCommandsCheckConfig(t, bins) })
	exported := map[string]string{"XETCDN_EDGE_ORIGIN_TOKEN": fakeEnv("XETCDN_EDGE_ORIGIN_TOKEN")}
	checked := 0
	for name, s := range ours {
		if len(s.Entrypoint) != 1 {
			continue
		}
		bin := bins[filepath.Base(s.Entrypoint[0])]
		if bin == "" {
			t.Errorf("compose service %s: entrypoint %q is not an xetcdn server", name, s.Entrypoint)
			continue
		}
		env := []string{}
		for k, v := range s.Environment {
			env = append(env, k+"="+interpolate(v, exported))
		}
		args := append([]string{"check-config"}, hostConfig(t, s)...)
		code, out, errOut := testenv.RunStatus(t, bin, env, args...)
		if code != 0 {
			t.Errorf("compose service %s: %s %q: status %d\n%s", name, filepath.Base(bin), args, code, errOut)
			continue
		}
		checked++
		t.Logf("compose service %s: %s", name, strings.TrimSpace(out))
	}
	if checked < 3 {
		t.Errorf("compose: %d xetcdn servers passed check-config, want the origin and two edges", checked)
	}
}

// hostConfig is a service's command line with --config pointing at the file compose mounts
// there, in deploy/compose.
func hostConfig(t *testing.T, s composeService) []string {
	t.Helper()
	args := slices.Clone(s.Command)
	for i := range args {
		if args[i] != "--config" || i+1 == len(args) {
			continue
		}
		found := false
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			if len(parts) >= 2 && parts[1] == args[i+1] && strings.HasPrefix(parts[0], "./") {
				args[i+1] = filepath.Join(repoRoot, "deploy/compose", parts[0])
				found = true
			}
		}
		if !found {
			t.Fatalf("--config %s is not a file compose mounts from deploy/compose", args[i+1])
		}
	}
	return args
}

// configValue is the top-level string key of the service's --config file.
func configValue(t *testing.T, s composeService, key string) string {
	t.Helper()
	args := hostConfig(t, s)
	f := flagValue(args, "config")
	if f == "" {
		return ""
	}
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil { // JSON is YAML
		t.Fatalf("%s: %v", f, err)
	}
	return fmt.Sprint(m[key])
}

// deployCommandsCheckConfig runs every command line of the systemd units, the compose file and
// the Kubernetes manifests through the real binary's `check-config` (the secrets supplied), as
// an operator would before a rollout. bins maps xet-origin and xet-edge to their binaries.
func deployCommandsCheckConfig(t *testing.T, bins map[string]string) {
	var env []string
	for _, k := range []string{"XETCDN_POSTGRES_DSN", "XETCDN_S3_ACCESS_KEY", "XETCDN_S3_SECRET_KEY", "XETCDN_EDGE_ORIGIN_TOKEN"} {
		env = append(env, k+"="+fakeEnv(k))
	}
	var cmds []command
	cmds = append(cmds, systemdCommands(t)...)
	cmds = append(cmds, composeCommands(t)...)
	cmds = append(cmds, kubernetesCommands(t)...)
	for _, c := range cmds {
		args := append([]string{"check-config"}, c.args...)
		if code, _, errOut := testenv.RunStatus(t, bins["xet-"+c.tier], env, args...); code != 0 {
			t.Errorf("%s: xet-%s %q: status %d\n%s", c.where, c.tier, args, code, errOut)
		}
	}
}
