package opscheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// monitoringNamespace is the namespace the manifests let reach the admin listeners.
const monitoringNamespace = "monitoring"

// obj is a Kubernetes object or a compose file read as plain YAML.
type obj = map[string]any

// at walks m along keys; nil when a key is missing or not a mapping on the way.
func at(m any, keys ...string) any {
	for _, k := range keys {
		mm, ok := m.(obj)
		if !ok {
			return nil
		}
		m = mm[k]
	}
	return m
}

func str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int:
		return strconv.Itoa(x)
	}
	return ""
}

func list(v any) []any { l, _ := v.([]any); return l }

// labelsMatch reports whether the matchLabels-style selector sel selects labels. An empty or
// missing selector selects everything.
func labelsMatch(sel any, labels any) bool {
	sm, _ := sel.(obj)
	lm, _ := labels.(obj)
	for k, v := range sm {
		if str(lm[k]) != str(v) {
			return false
		}
	}
	return true
}

// podPort is one container port of a workload: its number, name and protocol.
type podPort struct {
	num   int
	name  string
	proto string
}

func (p podPort) is(ref any) bool { return str(ref) == p.name || str(ref) == strconv.Itoa(p.num) }

// TestAdminPrivateInManifests reads the Kubernetes manifests as deployed and checks that the
// admin listener of every workload (the port its configuration's admin_listen binds) is private
// by construction: no Service that selects the pods exposes it; a NetworkPolicy selects the
// pods, admits the admin port only from the monitoring namespace and the API ports from
// anywhere. The compose file publishes admin ports on the host's loopback only, and the example
// configurations for bare hosts bind admin listeners to loopback.
func TestAdminPrivateInManifests(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(repoRoot, "deploy/kubernetes/*.yaml"))
	var objs []obj
	for _, f := range files {
		objs = append(objs, readYAML(t, f)...)
	}
	configs := map[string]string{} // ConfigMap file name → body
	for _, o := range objs {
		if o["kind"] == "ConfigMap" {
			for k, v := range at(o, "data").(obj) {
				configs[k] = str(v)
			}
		}
	}
	workloads := 0
	for _, o := range objs {
		if o["kind"] != "Deployment" && o["kind"] != "DaemonSet" && o["kind"] != "StatefulSet" {
			continue
		}
		workloads++
		name := str(at(o, "metadata", "name"))
		labels := at(o, "spec", "template", "metadata", "labels")
		var ports []podPort
		adminPort := 0
		for _, c := range list(at(o, "spec", "template", "spec", "containers")) {
			for _, p := range list(at(c, "ports")) {
				n, _ := at(p, "containerPort").(int)
				ports = append(ports, podPort{num: n, name: str(at(p, "name")), proto: cmpOr(str(at(p, "protocol")), "TCP")})
			}
			if a := adminListen(t, list(at(c, "args")), configs); a != 0 {
				adminPort = a
			}
		}
		if adminPort == 0 {
			t.Errorf("%s: no admin listener configured (the test expects one to check)", name)
			continue
		}
		admin := podPort{num: adminPort, proto: "TCP"}
		for _, p := range ports {
			if p.num == adminPort && p.proto == "TCP" {
				admin = p
			}
		}
		if admin.name == "" {
			t.Errorf("%s: admin port %d is not a named container port", name, adminPort)
		}
		var api []podPort
		for _, p := range ports {
			if p != admin {
				api = append(api, p)
			}
		}
		checkServices(t, name, objs, labels, admin)
		checkNetworkPolicy(t, name, objs, labels, admin, api)
	}
	if workloads < 2 {
		t.Errorf("found %d workloads, want the origin and the edge", workloads)
	}
	checkCompose(t)
	examples, _ := filepath.Glob(filepath.Join(repoRoot, "deploy/config/*.json"))
	for _, f := range examples {
		host, _, _ := net.SplitHostPort(configAdmin(t, f))
		if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsLoopback()) {
			t.Errorf("%s: admin_listen host %q is not loopback", rel(f), host)
		}
	}
}

// adminListen is the port of admin_listen in the ConfigMap file named by --config in args.
func adminListen(t *testing.T, args []any, configs map[string]string) int {
	for i := 0; i+1 < len(args); i++ {
		if str(args[i]) != "--config" {
			continue
		}
		body, ok := configs[filepath.Base(str(args[i+1]))]
		if !ok {
			t.Fatalf("--config %s is in no ConfigMap", str(args[i+1]))
		}
		var c struct {
			AdminListen string `json:"admin_listen"`
		}
		if err := json.Unmarshal([]byte(body), &c); err != nil {
			t.Fatal(err)
		}
		if c.AdminListen == "" {
			return 0
		}
		_, p, err := net.SplitHostPort(c.AdminListen)
		n, _ := strconv.Atoi(p)
		if err != nil || n == 0 {
			t.Fatalf("admin_listen %q", c.AdminListen)
		}
		return n
	}
	return 0
}

// checkServices: no Service selecting the pods forwards to the admin port.
func checkServices(t *testing.T, name string, objs []obj, labels any, admin podPort) {
	for _, s := range objs {
		if s["kind"] != "Service" || !labelsMatch(at(s, "spec", "selector"), labels) {
			continue
		}
		for _, p := range list(at(s, "spec", "ports")) {
			target := at(p, "targetPort")
			if target == nil {
				target = at(p, "port")
			}
			if admin.is(target) {
				t.Errorf("%s: Service %s exposes the admin port (%v)", name, str(at(s, "metadata", "name")), target)
			}
		}
	}
}

// checkNetworkPolicy: a policy selects the pods for ingress; every ingress rule that admits the
// admin port admits only the monitoring namespace; one rule admits each API port from anywhere.
func checkNetworkPolicy(t *testing.T, name string, objs []obj, labels any, admin podPort, api []podPort) {
	var rules []any
	selected := false
	for _, np := range objs {
		if np["kind"] != "NetworkPolicy" || !labelsMatch(at(np, "spec", "podSelector", "matchLabels"), labels) {
			continue
		}
		types := list(at(np, "spec", "policyTypes"))
		if !slices.Contains(types, any("Ingress")) {
			continue
		}
		selected = true
		rules = append(rules, list(at(np, "spec", "ingress"))...)
	}
	if !selected {
		t.Errorf("%s: no NetworkPolicy restricts ingress to its pods", name)
		return
	}
	admits := func(rule any, p podPort) bool {
		ports := list(at(rule, "ports"))
		if len(ports) == 0 {
			return true // every port
		}
		for _, rp := range ports {
			if p.is(at(rp, "port")) && cmpOr(str(at(rp, "protocol")), "TCP") == p.proto {
				return true
			}
		}
		return false
	}
	monitoringOnly := func(rule any) bool {
		from := list(at(rule, "from"))
		if len(from) == 0 {
			return false // everyone
		}
		for _, peer := range from {
			if at(peer, "ipBlock") != nil ||
				str(at(peer, "namespaceSelector", "matchLabels", "kubernetes.io/metadata.name")) != monitoringNamespace {
				return false
			}
		}
		return true
	}
	scraped := false
	for _, r := range rules {
		if !admits(r, admin) {
			continue
		}
		if !monitoringOnly(r) {
			t.Errorf("%s: a NetworkPolicy rule admits the admin port %d from outside the %s namespace: %v",
				name, admin.num, monitoringNamespace, r)
		}
		scraped = true
	}
	if !scraped {
		t.Errorf("%s: no rule lets the %s namespace scrape the admin port", name, monitoringNamespace)
	}
	for _, p := range api {
		open := false
		for _, r := range rules {
			open = open || (admits(r, p) && len(list(at(r, "from"))) == 0)
		}
		if !open {
			t.Errorf("%s: no NetworkPolicy rule admits API port %d/%s from anywhere", name, p.num, p.proto)
		}
	}
}

// checkCompose: the origin's and the edge's admin ports are published on loopback only, their
// API ports are published (in deploy/compose-regions, the origins' API is published by the
// balancer instead; TestComposeRegions checks that one).
func checkCompose(t *testing.T) {
	for _, d := range []string{"deploy/compose", "deploy/compose-regions"} {
		checkComposeDir(t, d, d == "deploy/compose")
	}
}

func checkComposeDir(t *testing.T, d string, apiPublished bool) {
	dir := filepath.Join(repoRoot, d)
	docs := readYAML(t, filepath.Join(dir, "compose.yaml"))
	if len(docs) != 1 {
		t.Fatalf("compose.yaml: %d documents", len(docs))
	}
	checked := 0
	for name, s := range at(docs[0], "services").(obj) {
		var cfg string
		cmd := list(at(s, "command"))
		for i := 0; i+1 < len(cmd); i++ {
			if str(cmd[i]) == "--config" {
				cfg = filepath.Join(dir, filepath.Base(str(cmd[i+1])))
			}
		}
		if cfg == "" {
			continue
		}
		_, port, err := net.SplitHostPort(configAdmin(t, cfg))
		if err != nil {
			t.Errorf("compose service %s: no admin listener in %s", name, rel(cfg))
			continue
		}
		checked++
		published := 0
		for _, p := range list(at(s, "ports")) {
			hostIP, container := publishedPort(str(p))
			if container != port {
				published++
				continue
			}
			if ip := net.ParseIP(hostIP); ip == nil || !ip.IsLoopback() {
				t.Errorf("compose service %s publishes its admin port as %q: not on loopback only", name, str(p))
			}
		}
		edge := strings.Contains(fmt.Sprint(at(s, "entrypoint")), "xet-edge")
		if published == 0 && (apiPublished || edge) {
			t.Errorf("compose service %s publishes no API port", name)
		}
	}
	if checked < 2 {
		t.Errorf("compose: checked %d services with an admin listener, want the origin and the edge", checked)
	}
}

// publishedPort splits a compose short port syntax ("[ip:][host:]container[/proto]").
func publishedPort(s string) (hostIP, container string) {
	s, _, _ = strings.Cut(s, "/")
	i := strings.LastIndex(s, ":")
	if i < 0 {
		return "", s
	}
	container, s = s[i+1:], s[:i]
	if j := strings.LastIndex(s, ":"); j >= 0 {
		hostIP = strings.Trim(s[:j], "[]")
	}
	return hostIP, container
}

// configAdmin is admin_listen of a JSON configuration file.
func configAdmin(t *testing.T, file string) string {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		AdminListen string `json:"admin_listen"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("%s: %v", rel(file), err)
	}
	return c.AdminListen
}

func readYAML(t *testing.T, file string) []obj {
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	var out []obj
	for {
		var o obj
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", rel(file), err)
		}
		if o != nil {
			out = append(out, o)
		}
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
