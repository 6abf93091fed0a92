package opscheck

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/xetcdn/xetcdn/internal/testenv"
)

// The two-region deployment shape (issue 12 item 4; deploy/README.md "Two regions"): the compose
// file in deploy/compose-regions and the Kubernetes overlays in deploy/kubernetes-regions. There
// is no Docker daemon or cluster here: the checks below read the files, cross-check them with
// each other, and run every xetcdn command line through its binary's check-config.

const testSecret = "opscheck-shared-secret-0123456789abcdef0123456789"

// writeTestSecret writes a shared secret of valid length and returns its path.
func writeTestSecret(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(testSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// checkConfig runs `check-config args` with env, fails the test (naming where) on a non-zero
// status and returns the binary's summary line.
func checkConfig(t *testing.T, bin, where string, env, args []string) string {
	t.Helper()
	args = append([]string{"check-config"}, args...)
	code, out, errOut := testenv.RunStatus(t, bin, env, args...)
	if code != 0 {
		t.Errorf("%s: %s %q: status %d\n%s", where, filepath.Base(bin), args, code, errOut)
	}
	t.Logf("%s: %s", where, strings.TrimSpace(out))
	return out
}

// sharedKeys is what an origin's check-config says when its keys come from the shared secret.
const sharedKeys = "keys from shared secret"

// haproxyBackends reads `backend NAME` sections and their `server NAME HOST:PORT` lines, and
// `frontend` binds with their default_backend.
func haproxyBackends(t *testing.T, file string) (servers map[string][]string, binds map[string]string) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	servers, binds = map[string][]string{}, map[string]string{}
	var section, name, bind string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		w := strings.Fields(sc.Text())
		if len(w) == 0 || strings.HasPrefix(w[0], "#") {
			continue
		}
		switch w[0] {
		case "global", "defaults", "resolvers", "frontend", "backend", "listen":
			section, name, bind = w[0], "", ""
			if len(w) > 1 {
				name = w[1]
			}
		case "server":
			if section == "backend" && len(w) >= 3 {
				servers[name] = append(servers[name], w[2])
			}
		case "bind":
			bind = w[1]
		case "default_backend":
			if section == "frontend" {
				binds[w[1]] = bind
			}
		}
	}
	return servers, binds
}

// TestComposeRegions: deploy/compose-regions/compose.yaml has two or more origin replicas with
// one configuration file and the shared secret from a compose secret (a file the operator
// makes); HAProxy balances exactly those replicas on the port of the origins' public URL and
// exactly the MinIO nodes on the port the origins' S3 endpoint names; MinIO runs distributed
// over all its nodes (one `{1...N}` expansion naming them all, with N the number of nodes, four
// or more); two or more regions of two or more edges each, every region one of the origins'
// regions.order and every edge given every replica; and every xetcdn service's command line
// passes its binary's check-config (the secret file supplied). HAProxy's configuration passes
// `haproxy -c` where HAProxy is installed (.ci/run installs Debian's package, so CI always runs
// it).
func TestComposeRegions(t *testing.T) {
	dir := filepath.Join(repoRoot, "deploy/compose-regions")
	b, err := os.ReadFile(filepath.Join(dir, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Services map[string]struct {
			composeService `yaml:",inline"`
			Secrets        []string `yaml:"secrets"`
		} `yaml:"services"`
		Secrets map[string]struct {
			File string `yaml:"file"`
		} `yaml:"secrets"`
		Volumes map[string]any `yaml:"volumes"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	tag, _ := dockerfile(t)
	bins := map[string]string{
		"xet-origin": testenv.Build(t, "github.com/xetcdn/xetcdn/cmd/xet-origin"),
		"xet-edge":   testenv.Build(t, "github.com/xetcdn/xetcdn/cmd/xet-edge"),
	}
	secret := writeTestSecret(t)
	exported := map[string]string{"XETCDN_EDGE_ORIGIN_TOKEN": fakeEnv("XETCDN_EDGE_ORIGIN_TOKEN")}

	type originSvc struct {
		name, config, listenPort, publicURL, s3 string
		order                                   []string
	}
	var origins []originSvc
	edgesByRegion := map[string][]string{}
	edgeOrigins := map[string][]string{}
	var minios []string
	minioCmds := map[string]bool{}
	for _, name := range sortedKeys(c.Services) {
		s := c.Services[name]
		if strings.HasPrefix(s.Image, "minio/minio") {
			minios = append(minios, name)
			minioCmds[strings.Join(s.Command, " ")] = true
		}
		if s.Image != tag || len(s.Entrypoint) != 1 {
			continue
		}
		bin := bins[filepath.Base(s.Entrypoint[0])]
		if bin == "" {
			t.Errorf("service %s: entrypoint %q is not an xetcdn server", name, s.Entrypoint)
			continue
		}
		args := mapConfig(t, s.Command, dir)
		// The compose secret the origins read: declared, given to the service, made from a file.
		if i := slices.Index(args, "--secret-file"); i >= 0 && i+1 < len(args) {
			sname := strings.TrimPrefix(args[i+1], "/run/secrets/")
			if !slices.Contains(s.Secrets, sname) || c.Secrets[sname].File == "" {
				t.Errorf("service %s: --secret-file %s is not a compose secret given to it with a file", name, args[i+1])
			}
			args[i+1] = secret
		}
		env := []string{}
		for k, v := range s.Environment {
			env = append(env, k+"="+interpolate(v, exported))
		}
		summary := checkConfig(t, bin, "compose-regions/"+name, env, args)

		var cfg map[string]any
		if f := flagValue(args, "config"); f != "" {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(raw, &cfg); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
		}
		str := func(flag string, path ...string) string {
			if v := flagValue(args, flag); v != "" {
				return v
			}
			var cur any = cfg
			for _, p := range path {
				m, _ := cur.(map[string]any)
				cur = m[p]
			}
			s, _ := cur.(string)
			return s
		}
		if filepath.Base(bin) == "xet-origin" || strings.Contains(bin, "xet-origin") {
			if !strings.Contains(summary, sharedKeys) {
				t.Errorf("service %s: origin replica whose keys do not come from the shared secret (check-config: %q)", name, summary)
			}
			_, port, _ := strings.Cut(str("listen", "listen"), ":")
			o := originSvc{name: name, config: flagValue(args, "config"), listenPort: port,
				publicURL: str("public-url", "public_url"), s3: str("", "objects", "endpoint")}
			if regions, ok := cfg["regions"].(map[string]any); ok {
				for _, r := range regions["order"].([]any) {
					o.order = append(o.order, fmt.Sprint(r))
				}
			}
			origins = append(origins, o)
			continue
		}
		region := str("region", "region")
		edgesByRegion[region] = append(edgesByRegion[region], name)
		edgeOrigins[name] = strings.Split(str("origin", "origin"), ",")
	}

	if len(origins) < 2 {
		t.Fatalf("compose-regions: origins %v, want two or more replicas", origins)
	}
	for _, o := range origins[1:] {
		if o.config != origins[0].config || !slices.Equal(o.order, origins[0].order) || o.publicURL != origins[0].publicURL {
			t.Errorf("replicas %s and %s differ in configuration file, regions or public URL", origins[0].name, o.name)
		}
	}
	o := origins[0]

	// HAProxy: the replicas, and the MinIO nodes.
	cfgFile := filepath.Join(dir, "haproxy.cfg")
	servers, binds := haproxyBackends(t, cfgFile)
	var lbName string
	for _, name := range sortedKeys(c.Services) {
		for _, v := range c.Services[name].Volumes {
			if src, _, _ := strings.Cut(v, ":"); src == "./haproxy.cfg" {
				lbName = name
			}
		}
	}
	if lbName == "" {
		t.Fatal("compose-regions: no service mounts ./haproxy.cfg")
	}
	want := func(what string, names []string, port string) []string {
		var out []string
		for _, n := range names {
			out = append(out, n+":"+port)
		}
		sort.Strings(out)
		return out
	}
	var originNames []string
	for _, o := range origins {
		originNames = append(originNames, o.name)
	}
	matched := map[string]bool{}
	for backend, srv := range servers {
		got := slices.Sorted(slices.Values(srv))
		switch {
		case slices.Equal(got, want("origins", originNames, o.listenPort)):
			matched["origins"] = true
			pub, err := url.Parse(o.publicURL)
			if err != nil || !strings.HasSuffix(binds[backend], ":"+pub.Port()) {
				t.Errorf("haproxy backend %s (the replicas) is bound on %q; the origins' public_url is %s", backend, binds[backend], o.publicURL)
			}
			if !slices.Contains(c.Services[lbName].Ports, pub.Port()+":"+pub.Port()) {
				t.Errorf("service %s does not publish %s, the port of public_url %s", lbName, pub.Port(), o.publicURL)
			}
		case slices.Equal(got, want("minio", minios, "9000")):
			matched["minio"] = true
			if o.s3 != lbName+binds[backend] {
				t.Errorf("origins' objects.endpoint %q: want the balancer's MinIO frontend %s%s", o.s3, lbName, binds[backend])
			}
		default:
			t.Errorf("haproxy backend %s: servers %v are neither all the replicas nor all the MinIO nodes", backend, got)
		}
	}
	if !matched["origins"] || !matched["minio"] {
		t.Errorf("haproxy.cfg: backends %v: want one with every replica and one with every MinIO node", servers)
	}
	if hp, err := exec.LookPath("haproxy"); err == nil {
		out, err := exec.Command(hp, "-c", "-f", cfgFile).CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("Configuration file is valid")) {
			t.Errorf("haproxy -c -f %s: %v\n%s", rel(cfgFile), err, out)
		}
	} else if os.Getenv("CI") == "true" {
		t.Errorf("haproxy is not installed: .ci/run installs it to check %s", rel(cfgFile))
	} else {
		t.Logf("haproxy not installed here: %s checked by reading only", rel(cfgFile))
	}

	// MinIO: distributed over every node, erasure-coded.
	if len(minios) < 4 || len(minioCmds) != 1 {
		t.Errorf("minio services %v with %d distinct commands: want four or more nodes, one command", minios, len(minioCmds))
	}
	for cmd := range minioCmds {
		m := regexp.MustCompile(`http://([^{\s]+)\{1\.\.\.(\d+)\}(/\S*)?`).FindStringSubmatch(cmd)
		if m == nil || m[2] != fmt.Sprint(len(minios)) {
			t.Errorf("minio command %q: want one http://NAME{1...%d}/… expansion over the nodes", cmd, len(minios))
			continue
		}
		for i := 1; i <= len(minios); i++ {
			if !slices.Contains(minios, fmt.Sprintf("%s%d", m[1], i)) {
				t.Errorf("minio command %q names %s%d, which is no service", cmd, m[1], i)
			}
		}
	}

	// Regions: two or more of two or more edges, each in the origins' order, each edge given
	// every replica.
	if len(edgesByRegion) < 2 {
		t.Errorf("edges by region %v: want two or more regions", edgesByRegion)
	}
	for region, edges := range edgesByRegion {
		if len(edges) < 2 {
			t.Errorf("region %s has edges %v: want two or more", region, edges)
		}
		if !slices.Contains(o.order, region) {
			t.Errorf("region %s of edges %v is not in the origins' regions.order %v", region, edges, o.order)
		}
	}
	for edge, urls := range edgeOrigins {
		var got []string
		for _, u := range urls {
			p, err := url.Parse(u)
			if err != nil {
				t.Errorf("edge %s: origin %q: %v", edge, u, err)
				continue
			}
			got = append(got, p.Host)
		}
		if slices.Sort(got); !slices.Equal(got, want("origins", originNames, o.listenPort)) {
			t.Errorf("edge %s: origins %v, want every replica %v", edge, urls, originNames)
		}
	}
	// Volumes the servers write are declared.
	for name, s := range c.Services {
		for _, v := range s.Volumes {
			if src, _, _ := strings.Cut(v, ":"); !strings.HasPrefix(src, ".") && !strings.HasPrefix(src, "/") {
				if _, ok := c.Volumes[src]; !ok {
					t.Errorf("service %s: volume %s is not declared", name, src)
				}
			}
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	})
}

// ---- Kubernetes overlays ----------------------------------------------------------------------

// kobj is a Kubernetes object as a generic YAML map.
type kobj = map[string]any

func kindName(o kobj) string {
	md, _ := o["metadata"].(kobj)
	return fmt.Sprintf("%v/%v", o["kind"], md["name"])
}

// kustomization is the part of a kustomization.yaml the overlays use; unknown fields are an
// error, so a field this reader would ignore cannot slip in.
type kustomization struct {
	APIVersion       string   `yaml:"apiVersion"`
	Kind             string   `yaml:"kind"`
	Resources        []string `yaml:"resources"`
	GeneratorOptions struct {
		DisableNameSuffixHash bool `yaml:"disableNameSuffixHash"`
	} `yaml:"generatorOptions"`
	ConfigMapGenerator []struct {
		Name      string   `yaml:"name"`
		Namespace string   `yaml:"namespace"`
		Behavior  string   `yaml:"behavior"`
		Files     []string `yaml:"files"`
	} `yaml:"configMapGenerator"`
	Patches []struct {
		Path  string `yaml:"path"`
		Patch string `yaml:"patch"`
	} `yaml:"patches"`
}

func decodeAll(t *testing.T, where string, r io.Reader) []kobj {
	t.Helper()
	dec := yaml.NewDecoder(r)
	var out []kobj
	for {
		var o kobj
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if o != nil {
			out = append(out, o)
		}
	}
}

// kustomize builds dir the way `kustomize build` does for the features the overlays use:
// resources (files, and directories holding a kustomization), configMapGenerator with behavior
// replace (and no name hash), and strategic-merge patches (files or inline), `$patch: delete`
// included. Every file referenced must exist and every patch and replacement must find its
// target; anything else is an error.
func kustomize(t *testing.T, dir string) []kobj {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatalf("%s: %v", rel(dir), err)
	}
	var k kustomization
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", rel(dir), err)
	}
	if k.Kind != "Kustomization" {
		t.Fatalf("%s/kustomization.yaml: kind %q", rel(dir), k.Kind)
	}
	var objs []kobj
	for _, r := range k.Resources {
		p := filepath.Join(dir, r)
		st, err := os.Stat(p)
		if err != nil {
			t.Fatalf("%s: resource %s: %v", rel(dir), r, err)
		}
		if st.IsDir() {
			objs = append(objs, kustomize(t, p)...)
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, decodeAll(t, rel(p), f)...)
		f.Close()
	}
	find := func(kind, name string) int {
		return slices.IndexFunc(objs, func(o kobj) bool { return kindName(o) == kind+"/"+name })
	}
	for _, g := range k.ConfigMapGenerator {
		if g.Behavior != "replace" || !k.GeneratorOptions.DisableNameSuffixHash {
			t.Fatalf("%s: configMapGenerator %s: only behavior replace without name hashes is read here", rel(dir), g.Name)
		}
		i := find("ConfigMap", g.Name)
		if i < 0 {
			t.Fatalf("%s: configMapGenerator %s replaces a ConfigMap the resources do not have", rel(dir), g.Name)
		}
		data := kobj{}
		for _, f := range g.Files {
			b, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				t.Fatalf("%s: configMapGenerator %s: %v", rel(dir), g.Name, err)
			}
			data[filepath.Base(f)] = string(b)
		}
		objs[i]["data"] = data
	}
	for _, p := range k.Patches {
		var patches []kobj
		switch {
		case p.Path != "" && p.Patch == "":
			f, err := os.Open(filepath.Join(dir, p.Path))
			if err != nil {
				t.Fatalf("%s: patch %s: %v", rel(dir), p.Path, err)
			}
			patches = decodeAll(t, p.Path, f)
			f.Close()
		case p.Patch != "" && p.Path == "":
			patches = decodeAll(t, rel(dir)+" inline patch", strings.NewReader(p.Patch))
		default:
			t.Fatalf("%s: a patch needs a path or an inline patch", rel(dir))
		}
		for _, pt := range patches {
			md, _ := pt["metadata"].(kobj)
			i := find(fmt.Sprint(pt["kind"]), fmt.Sprint(md["name"]))
			if i < 0 {
				t.Fatalf("%s: patch of %s: no such resource", rel(dir), kindName(pt))
			}
			if pt["$patch"] == "delete" {
				objs = slices.Delete(objs, i, i+1)
				continue
			}
			objs[i] = merge(objs[i], pt, "").(kobj)
		}
	}
	return objs
}

// merge applies a strategic-merge patch: maps merge key by key; lists of objects merge by their
// Kubernetes merge key (mountPath for volumeMounts, containerPort for ports, name otherwise);
// other values are replaced.
func merge(base, patch any, field string) any {
	switch p := patch.(type) {
	case kobj:
		b, ok := base.(kobj)
		if !ok {
			return p
		}
		out := kobj{}
		for k, v := range b {
			out[k] = v
		}
		for k, v := range p {
			out[k] = merge(b[k], v, k)
		}
		return out
	case []any:
		b, ok := base.([]any)
		key := map[string]string{"volumeMounts": "mountPath", "ports": "containerPort"}[field]
		if key == "" {
			key = "name"
		}
		if !ok || len(p) == 0 {
			return p
		}
		if _, objects := p[0].(kobj); !objects {
			return p
		}
		out := slices.Clone(b)
		for _, pe := range p {
			pm := pe.(kobj)
			j := slices.IndexFunc(out, func(e any) bool { m, _ := e.(kobj); return m != nil && m[key] == pm[key] })
			if j < 0 {
				out = append(out, pm)
			} else {
				out[j] = merge(out[j], pm, "")
			}
		}
		return out
	}
	return patch
}

// get walks o along path (map keys).
func get(o any, path ...string) any {
	for _, p := range path {
		m, _ := o.(kobj)
		o = m[p]
	}
	return o
}

// TestKustomizeRegions builds each overlay of deploy/kubernetes-regions (kustomize above; also
// `kubectl kustomize`, compared object by object, where kubectl is installed) and checks the
// result: every container's image is the Dockerfile's; every ConfigMap and Secret a workload
// names exists in the overlay or in secrets.example.yaml; each container's command line, with
// the files its ConfigMap mounts (and a shared secret where auth.secret_file names one), passes
// its binary's check-config; exactly one overlay runs the origin, with two or more replicas and
// its keys from the shared secret; every overlay has edges, each overlay's region is its own and
// in the origin's regions.order, and each edge's origin is the origin's Service (in its
// region) or its public URL (elsewhere).
func TestKustomizeRegions(t *testing.T) {
	tag, _ := dockerfile(t)
	bins := map[string]string{
		"origin": testenv.Build(t, "github.com/xetcdn/xetcdn/cmd/xet-origin"),
		"edge":   testenv.Build(t, "github.com/xetcdn/xetcdn/cmd/xet-edge"),
	}
	secretsDoc, err := os.ReadFile(filepath.Join(repoRoot, "deploy/kubernetes/secrets.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	overlays, _ := filepath.Glob(filepath.Join(repoRoot, "deploy/kubernetes-regions/*/kustomization.yaml"))
	if len(overlays) < 2 {
		t.Fatalf("deploy/kubernetes-regions: %d overlays, want one per region, two or more", len(overlays))
	}
	secret := writeTestSecret(t)
	type edgeCfg struct{ overlay, region, origin string }
	var edges []edgeCfg
	var originCfg map[string]any
	originOverlay, originService := "", ""
	regionOf := map[string]string{}
	for _, kf := range overlays {
		dir := filepath.Dir(kf)
		name := filepath.Base(dir)
		objs := kustomize(t, dir)
		if kubectl, err := exec.LookPath("kubectl"); err == nil {
			out, err := exec.Command(kubectl, "kustomize", dir).Output()
			if err != nil {
				t.Fatalf("kubectl kustomize %s: %v", rel(dir), err)
			}
			theirs := decodeAll(t, "kubectl kustomize "+rel(dir), bytes.NewReader(out))
			// Objects, ConfigMap data and pod volumes (as a set: a patch may reorder them).
			summary := func(o kobj) string {
				var vols []string
				for _, v := range asList(get(o, "spec", "template", "spec", "volumes")) {
					vols = append(vols, fmt.Sprint(v))
				}
				slices.Sort(vols)
				return kindName(o) + " " + fmt.Sprint(get(o, "data")) + fmt.Sprint(vols)
			}
			var a, b []string
			for _, o := range objs {
				a = append(a, summary(o))
			}
			for _, o := range theirs {
				b = append(b, summary(o))
			}
			slices.Sort(a)
			slices.Sort(b)
			if !slices.Equal(a, b) {
				t.Errorf("%s: this test's build differs from kubectl kustomize:\n%q\n%q", rel(dir), a, b)
			}
		}
		byName := map[string]kobj{}
		for _, o := range objs {
			byName[kindName(o)] = o
		}
		cmDir := t.TempDir()
		for _, o := range objs {
			if o["kind"] != "ConfigMap" {
				continue
			}
			for file, body := range get(o, "data").(kobj) {
				if err := os.WriteFile(filepath.Join(cmDir, file), []byte(fmt.Sprint(body)), 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}
		secretExists := func(s string) bool {
			return byName["Secret/"+s] != nil || regexp.MustCompile(`(?m)(name: |secret (generic|tls) )`+regexp.QuoteMeta(s)+`\b`).Match(secretsDoc)
		}
		for _, o := range objs {
			if o["kind"] != "Deployment" {
				continue
			}
			pod := get(o, "spec", "template", "spec")
			for _, v := range get(pod, "volumes").([]any) {
				if cm, _ := get(v, "configMap", "name").(string); cm != "" && byName["ConfigMap/"+cm] == nil {
					t.Errorf("%s: %s mounts ConfigMap %s, which the overlay does not have", name, kindName(o), cm)
				}
				if s, _ := get(v, "secret", "secretName").(string); s != "" && !secretExists(s) {
					t.Errorf("%s: %s mounts Secret %s, which neither the overlay nor secrets.example.yaml makes", name, kindName(o), s)
				}
			}
			for _, ci := range get(pod, "containers").([]any) {
				where := name + "/" + kindName(o) + "/" + fmt.Sprint(get(ci, "name"))
				if img := get(ci, "image"); img != tag {
					t.Errorf("%s: image %v, the Dockerfile builds %s", where, img, tag)
				}
				for _, ef := range asList(get(ci, "envFrom")) {
					if s, _ := get(ef, "secretRef", "name").(string); s != "" && !secretExists(s) {
						t.Errorf("%s: envFrom Secret %s, which neither the overlay nor secrets.example.yaml makes", where, s)
					}
				}
				var args []string
				for _, a := range asList(get(ci, "args")) {
					args = append(args, fmt.Sprint(a))
				}
				cmd := asList(get(ci, "command"))
				if len(cmd) != 1 {
					t.Errorf("%s: want the binary as the only command word", where)
					continue
				}
				tier := tierOf(fmt.Sprint(cmd[0]))
				args = mapConfig(t, args, cmDir)
				cfgFile := flagValue(args, "config")
				var cfg map[string]any
				b, err := os.ReadFile(cfgFile)
				if err == nil {
					err = json.Unmarshal(b, &cfg)
				}
				if err != nil {
					t.Fatalf("%s: config %s: %v", where, cfgFile, err)
				}
				if p, _ := get(cfg, "auth", "secret_file").(string); p != "" {
					// The file is a key of the Secret mounted where auth.secret_file points.
					if !mountsSecretAt(pod, ci, filepath.Dir(p)) {
						t.Errorf("%s: auth.secret_file %s is not in a mounted Secret", where, p)
					}
					cfg["auth"].(map[string]any)["secret_file"] = secret
					b, _ = json.Marshal(cfg)
					if err := os.WriteFile(cfgFile, b, 0o600); err != nil {
						t.Fatal(err)
					}
				}
				env := []string{}
				for _, k := range []string{"XETCDN_POSTGRES_DSN", "XETCDN_S3_ACCESS_KEY", "XETCDN_S3_SECRET_KEY", "XETCDN_EDGE_ORIGIN_TOKEN"} {
					env = append(env, k+"="+fakeEnv(k))
				}
				summary := checkConfig(t, bins[tier], where, env, args)
				switch tier {
				case "origin":
					if originOverlay != "" {
						t.Errorf("origins in overlays %s and %s: want the origin in one region", originOverlay, name)
					}
					originOverlay, originCfg = name, cfg
					if n, _ := get(o, "spec", "replicas").(int); n < 2 {
						t.Errorf("%s: %d origin replicas, want two or more", where, n)
					}
					if !strings.Contains(summary, sharedKeys) {
						t.Errorf("%s: the replicas' keys do not come from a shared secret (check-config: %q)", where, summary)
					}
					for _, s := range objs {
						if s["kind"] == "Service" && fmt.Sprint(get(s, "spec", "selector")) == fmt.Sprint(get(o, "spec", "selector", "matchLabels")) {
							md := s["metadata"].(kobj)
							port := get(asList(get(s, "spec", "ports"))[0], "port")
							originService = fmt.Sprintf("http://%v.%v.svc:%v", md["name"], md["namespace"], port)
						}
					}
				case "edge":
					r, _ := cfg["region"].(string)
					if v := flagValue(args, "region"); v != "" {
						r = v
					}
					o, _ := cfg["origin"].(string)
					edges = append(edges, edgeCfg{overlay: name, region: r, origin: o})
					if prev, ok := regionOf[name]; ok && prev != r {
						t.Errorf("overlay %s: edges of regions %s and %s", name, prev, r)
					}
					regionOf[name] = r
				}
			}
		}
	}
	if originOverlay == "" {
		t.Fatal("no overlay runs the origin")
	}
	var order []string
	for _, r := range asList(get(originCfg, "regions", "order")) {
		order = append(order, fmt.Sprint(r))
	}
	seen := map[string]string{}
	for _, kf := range overlays {
		name := filepath.Base(filepath.Dir(kf))
		r, ok := regionOf[name]
		if !ok {
			t.Errorf("overlay %s has no edges", name)
			continue
		}
		if !slices.Contains(order, r) {
			t.Errorf("overlay %s: region %q is not in the origin's regions.order %v", name, r, order)
		}
		if other, dup := seen[r]; dup {
			t.Errorf("overlays %s and %s serve the same region %s", other, name, r)
		}
		seen[r] = name
	}
	for _, e := range edges {
		want := fmt.Sprint(get(originCfg, "public_url"))
		if e.overlay == originOverlay {
			want = originService
		}
		for _, u := range strings.Split(e.origin, ",") {
			if u != want {
				t.Errorf("overlay %s: edge origin %s, want %s (the origin's %s)", e.overlay, u, want,
					map[bool]string{true: "Service, same region", false: "public URL, other region"}[e.overlay == originOverlay])
			}
		}
	}
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// mountsSecretAt reports whether container c of pod mounts a Secret volume at dir.
func mountsSecretAt(pod, c any, dir string) bool {
	for _, m := range asList(get(c, "volumeMounts")) {
		if get(m, "mountPath") != dir {
			continue
		}
		for _, v := range asList(get(pod, "volumes")) {
			if get(v, "name") == get(m, "name") && get(v, "secret", "secretName") != nil {
				return true
			}
		}
	}
	return false
}
