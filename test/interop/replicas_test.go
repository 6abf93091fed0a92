package interop

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xetclient"
)

// waitFor polls ok until it holds or within passes.
func waitFor(within time.Duration, ok func() bool) error {
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", within)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// opTimeout bounds one client operation of the replica-kill test (its retries included).
const opTimeout = 2 * time.Minute

// ack is an acknowledged upload: the client said it is stored.
type ack struct {
	by   string
	hash hash.Hash
	data []byte
}

// killStats is what the replica-kill test counts, per loop.
type killStats struct {
	mu        sync.Mutex
	acks      []ack
	ops       map[string]int
	failures  map[string][]string // loop -> client-visible errors (after the client's retries)
	firstOK   map[string]time.Duration
	spanMax   time.Duration // longest operation that was running at the kill
	killAt    time.Time
	afterKill map[string]int // operations started after the kill and finished fine
}

func (s *killStats) done(loop string, start time.Time, err error, a *ack) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ops[loop]++
	if err != nil {
		s.failures[loop] = append(s.failures[loop], err.Error())
		return
	}
	if a != nil {
		s.acks = append(s.acks, *a)
	}
	if s.killAt.IsZero() {
		return
	}
	if start.Before(s.killAt) {
		s.spanMax = max(s.spanMax, time.Since(start))
		return
	}
	s.afterKill[loop]++
	if _, ok := s.firstOK[loop]; !ok {
		s.firstOK[loop] = time.Since(s.killAt)
	}
}

func (s *killStats) pick(i int) (ack, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.acks) == 0 {
		return ack{}, false
	}
	return s.acks[i%len(s.acks)], true
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// TestReplicaKill: two origin replicas (different data dirs, one shared secret, one Postgres
// database, one MinIO bucket, public_url = the balancer) behind a load balancer, and an edge
// configured with both replicas' URLs. Stock hf_xet uploads and downloads through the balancer,
// the Go client's too, and Go downloads through the edge run concurrently; one replica is
// killed with SIGKILL mid-run. Then: no client-visible failure (after the clients' own
// retries), every loop completes operations started after the kill, and every acknowledged
// upload downloads byte-exact from the survivor. It runs behind two balancers: tcpBalancer
// (round robin, redispatch, health checks; written here) and the real HAProxy with
// deploy/compose-regions/haproxy.cfg (required in CI, where .ci/run installs Debian's haproxy).
func TestReplicaKill(t *testing.T) {
	t.Run("tcp balancer", func(t *testing.T) {
		replicaKill(t, func(t *testing.T, addrs []string) balancer { return newTCPBalancer(t, addrs...) })
	})
	t.Run("haproxy", func(t *testing.T) {
		hp, err := exec.LookPath("haproxy")
		if err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatal("haproxy is not installed (.ci/run installs it)")
			}
			t.Skip("haproxy is not installed")
		}
		replicaKill(t, func(t *testing.T, addrs []string) balancer { return startHAProxy(t, hp, addrs) })
	})
}

// balancer is the load balancer in front of the replicas.
type balancer interface {
	URL() string
	// active counts the connections to backend i that carried bytes within d (-1: unknown).
	active(i int, d time.Duration) int
	stats() string
}

func (b *tcpBalancer) stats() string {
	return fmt.Sprintf("balancer redispatched %d connections, refused %d", b.redispatched.Load(), b.refused.Load())
}

// haproxy runs HAProxy with the deployment's configuration (deploy/compose-regions/haproxy.cfg),
// adapted to the test: its origins frontend bound to a free loopback port, its origins backend
// naming the replicas' addresses, without Docker's resolver and without the MinIO sections.
type haproxy struct{ url string }

func (h *haproxy) URL() string                 { return h.url }
func (*haproxy) active(int, time.Duration) int { return -1 }
func (*haproxy) stats() string                 { return "HAProxy with deploy/compose-regions/haproxy.cfg" }

// startHAProxy starts HAProxy in front of addrs (the replicas need not run yet: its health
// checks find them).
func startHAProxy(t *testing.T, bin string, addrs []string) *haproxy {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(moduleRoot(t), "deploy", "compose-regions", "haproxy.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	listen := testenv.FreeAddr(t)
	var out []string
	section, servers := "", 0
	for _, line := range strings.Split(string(src), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "\t") {
			section = strings.Join(f, " ")
		}
		switch {
		case section == "resolvers docker" || section == "frontend minio" || section == "backend minio":
			continue
		case len(f) > 0 && f[0] == "default-server":
			line = strings.Replace(line, " resolvers docker", "", 1)
		case section == "frontend origins" && len(f) > 0 && f[0] == "bind":
			line = "    bind " + listen
		case section == "backend origins" && len(f) > 0 && f[0] == "server":
			if servers >= len(addrs) {
				t.Fatalf("haproxy.cfg names more replicas than the test runs: %q", line)
			}
			line = "    server " + f[1] + " " + addrs[servers] + " " + strings.Join(f[3:], " ")
			servers++
		}
		out = append(out, line)
	}
	if servers != len(addrs) {
		t.Fatalf("haproxy.cfg: %d servers in backend origins, want %d", servers, len(addrs))
	}
	cfg := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(strings.Join(out, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	h := &haproxy{url: "http://" + listen}
	testenv.Start(t, bin, []string{"-db", "-f", cfg}, testenv.Options{StartTimeout: startupTimeout})
	return h
}

// replicaKill is TestReplicaKill behind the balancer newLB starts in front of addrs.
func replicaKill(t *testing.T, newLB func(t *testing.T, addrs []string) balancer) {
	python := testenv.Require(t, testenv.Python)
	bins := buildBinaries(t)
	be := postgresMinIO(t)
	secret := "XETCDN_SECRET=" + hex.EncodeToString(randomBytes(32))
	be.env = append(be.env, secret)
	addrs := []string{testenv.FreeAddr(t), testenv.FreeAddr(t)}
	lb := newLB(t, addrs)
	cfg := filepath.Join(t.TempDir(), "origin.json")
	if err := os.WriteFile(cfg, be.config, 0o600); err != nil {
		t.Fatal(err)
	}
	var replicas []*testenv.Process
	for _, a := range addrs {
		replicas = append(replicas, testenv.Start(t, bins.origin, []string{"--data-dir", t.TempDir(), "--listen", a,
			"--public-url", lb.URL(), "--config", cfg}, serverOptions(be.env, "http://"+a+"/healthz")))
	}
	// The balancer serves once its health checks found a replica up.
	if err := waitFor(30*time.Second, func() bool {
		resp, err := http.Get(lb.URL() + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}); err != nil {
		t.Fatalf("balancer %s: %v", lb.URL(), err)
	}
	env := append(os.Environ(), secret)
	token := func(scope, access string) string {
		code, out, errOut := testenv.RunStatus(t, bins.origin, env, "token", "--scope", scope, "--access", access)
		if code != 0 {
			t.Fatalf("token: %d %s", code, errOut)
		}
		return strings.TrimSpace(out)
	}
	const kscope = "models/acme/replica-kill"
	w, r := token(kscope, "write"), token(kscope, "read")
	edgeHTTP := testenv.FreeAddr(t)
	edgeURL := "http://" + edgeHTTP
	testenv.Start(t, bins.edge, []string{"--origin", "http://" + addrs[0] + ",http://" + addrs[1],
		"--origin-token", token("edge", "edge"), "--data-dir", t.TempDir(), "--listen", testenv.FreeAddr(t),
		"--http-listen", edgeHTTP, "--public-url", edgeURL}, serverOptions(nil, edgeURL+"/healthz"))

	// XETCDN_REPLICA_KILL_ATTEMPTS=1 turns the clients' retries off: it measures what the
	// clients see without them (docs/decisions.md, "Origin replicas").
	attempts := 6
	if v := os.Getenv("XETCDN_REPLICA_KILL_ATTEMPTS"); v != "" {
		var err error
		if attempts, err = strconv.Atoi(v); err != nil || attempts < 1 {
			t.Fatalf("XETCDN_REPLICA_KILL_ATTEMPTS=%q: want a positive number", v)
		}
	}
	goClient := func(endpoint, tok string) *xetclient.Client {
		c, err := xetclient.New(xetclient.Options{Endpoint: endpoint, Token: tok,
			Retry: xetclient.RetryPolicy{MaxAttempts: attempts, BaseDelay: 200 * time.Millisecond, MaxDelay: 2 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	up, down, viaEdge := goClient(lb.URL(), w), goClient(lb.URL(), r), goClient(edgeURL, r)
	st := &killStats{ops: map[string]int{}, failures: map[string][]string{}, firstOK: map[string]time.Duration{},
		afterKill: map[string]int{}}

	goUpload := func(ctx context.Context, size int) (*ack, error) {
		data := randomBytes(size)
		res, err := up.UploadFiles(ctx, []xetclient.UploadFile{{Path: "f", Reader: bytes.NewReader(data)}}, xetclient.UploadOptions{})
		if err != nil {
			return nil, err
		}
		return &ack{by: "go", hash: res[0].FileHash, data: data}, nil
	}
	for range 2 { // something to download from the start
		a, err := goUpload(t.Context(), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		st.done("seed", time.Now(), nil, a)
	}

	hfEnv := func(dir string) []string {
		return append(os.Environ(), "HF_XET_CACHE="+dir, "HF_XET_CLIENT_RETRY_MAX_ATTEMPTS="+strconv.Itoa(attempts),
			"HF_XET_CLIENT_RETRY_BASE_DELAY=200ms", "HF_XET_CLIENT_RETRY_MAX_DURATION=60s")
	}
	driver := filepath.Join(moduleRoot(t), "test", "interop", "hfxet_driver.py")
	hf := func(ctx context.Context, dir string, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, python, append([]string{driver}, args...)...)
		cmd.Env = hfEnv(dir)
		dieWithTest(cmd)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return out, fmt.Errorf("hf_xet %s: %v: %s", args[0], err, tail(stderr.String(), 5))
		}
		return out, nil
	}
	hfUpload := func(ctx context.Context, dir string, size int) (*ack, error) {
		data := randomBytes(size)
		p := filepath.Join(dir, "up-"+hex.EncodeToString(randomBytes(4)))
		if err := os.WriteFile(p, data, 0o600); err != nil {
			return nil, err
		}
		defer os.Remove(p)
		out, err := hf(ctx, dir, "upload", "--endpoint", lb.URL(), "--token", w, p)
		if err != nil {
			return nil, err
		}
		var res struct {
			FileHash string `json:"file_hash"`
		}
		if err := json.Unmarshal(bytes.TrimSpace(out), &res); err != nil {
			return nil, fmt.Errorf("hf_xet upload printed %q: %v", out, err)
		}
		h, err := hash.Parse(res.FileHash)
		if err != nil {
			return nil, err
		}
		return &ack{by: "hf_xet", hash: h, data: data}, nil
	}
	hfDownload := func(ctx context.Context, dir string, a ack) error {
		p := filepath.Join(dir, "down-"+hex.EncodeToString(randomBytes(4)))
		defer os.Remove(p)
		if _, err := hf(ctx, dir, "download", "--endpoint", lb.URL(), "--token", r, "--hash", a.hash.String(),
			"--size", strconv.Itoa(len(a.data)), "-o", p); err != nil {
			return err
		}
		got, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, a.data) {
			return fmt.Errorf("hf_xet download of %s: %d bytes differ from the %d uploaded", a.hash, len(got), len(a.data))
		}
		return nil
	}
	goDownload := func(ctx context.Context, c *xetclient.Client, a ack) error {
		var buf bytes.Buffer
		if _, err := c.Download(ctx, a.hash, &buf, xetclient.DownloadOptions{}); err != nil {
			return err
		}
		if !bytes.Equal(buf.Bytes(), a.data) {
			return fmt.Errorf("download of %s: %d bytes differ from the %d uploaded", a.hash, buf.Len(), len(a.data))
		}
		return nil
	}

	loops := map[string]func(ctx context.Context, dir string, i int) (*ack, error){
		"hf_xet upload 1": func(ctx context.Context, dir string, i int) (*ack, error) { return hfUpload(ctx, dir, 3<<20) },
		"hf_xet upload 2": func(ctx context.Context, dir string, i int) (*ack, error) { return hfUpload(ctx, dir, 3<<20) },
		"hf_xet download": func(ctx context.Context, dir string, i int) (*ack, error) {
			a, _ := st.pick(i)
			return nil, hfDownload(ctx, dir, a)
		},
		"go upload": func(ctx context.Context, dir string, i int) (*ack, error) { return goUpload(ctx, 2<<20) },
		"go download": func(ctx context.Context, dir string, i int) (*ack, error) {
			a, _ := st.pick(i + 1)
			return nil, goDownload(ctx, down, a)
		},
		"go download via edge": func(ctx context.Context, dir string, i int) (*ack, error) {
			a, _ := st.pick(i + 2)
			return nil, goDownload(ctx, viaEdge, a)
		},
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var running atomic.Int64
	// A probe without retries: GET /healthz through the balancer on a new connection every
	// 20 ms. What it sees after the kill is what the balancer alone gives new requests.
	var probeMu sync.Mutex
	var probes, probeFails int
	var lastProbeFail time.Duration
	probeClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			resp, err := probeClient.Get(lb.URL() + "/healthz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			st.mu.Lock()
			killAt := st.killAt
			st.mu.Unlock()
			if killAt.IsZero() {
				continue
			}
			probeMu.Lock()
			probes++
			if err != nil {
				probeFails++
				lastProbeFail = time.Since(killAt)
			}
			probeMu.Unlock()
		}
	})
	for name, op := range loops {
		dir := t.TempDir()
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
				start := time.Now()
				running.Add(1)
				a, err := op(ctx, dir, i)
				running.Add(-1)
				cancel()
				st.done(name, start, err, a)
			}
		})
	}
	// Kill one replica once every loop has finished an operation and operations are running.
	deadline := time.Now().Add(3 * time.Minute)
	warm := func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		for name := range loops {
			if st.ops[name] == 0 {
				return false
			}
		}
		return true
	}
	for !warm() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	// ... and connections to it are carrying bytes, or (where the balancer cannot say) four
	// operations are running (bounded: the kill happens anyway).
	for i := 0; i < 200 && lb.active(0, 20*time.Millisecond) < 2 && (lb.active(0, 0) >= 0 || running.Load() < 4); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	inFlight, busy := running.Load(), lb.active(0, 20*time.Millisecond)
	st.mu.Lock()
	st.killAt = time.Now()
	st.mu.Unlock()
	replicas[0].Kill() // its error is the exit status: killed
	// Run on until every loop finished two operations it started after the kill.
	recovered := func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		for name := range loops {
			if st.afterKill[name] < 2 && len(st.failures[name]) == 0 {
				return false
			}
		}
		return true
	}
	for !recovered() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()

	st.mu.Lock()
	defer st.mu.Unlock()
	var names []string
	for name := range loops {
		names = append(names, name)
	}
	sort.Strings(names)
	var slowest time.Duration
	failures := 0
	for _, name := range names {
		t.Logf("%-22s ops %3d, after the kill %3d, first success %v after it, failures %d",
			name, st.ops[name], st.afterKill[name], st.firstOK[name].Round(time.Millisecond), len(st.failures[name]))
		slowest = max(slowest, st.firstOK[name])
		failures += len(st.failures[name])
		for _, e := range st.failures[name] {
			t.Errorf("%s: client-visible failure: %s", name, e)
		}
		if st.afterKill[name] < 2 {
			t.Errorf("%s: %d operations started after the kill succeeded, want 2", name, st.afterKill[name])
		}
	}
	busyText := "unknown"
	if busy >= 0 {
		busyText = strconv.Itoa(busy)
	}
	t.Logf("probe without retries: %d requests after the kill, %d failed, the last %v after it",
		probes, probeFails, lastProbeFail.Round(time.Millisecond))
	t.Logf("kill with %d operations in flight, %s connections to the killed replica carrying bytes; slowest operation across the kill %v; every loop served again %v after the kill; %s; client-visible failures %d",
		inFlight, busyText, st.spanMax.Round(time.Millisecond), slowest.Round(time.Millisecond), lb.stats(), failures)

	// Every acknowledged upload, byte-exact from the survivor (its reconstructions asked directly;
	// their transfer URLs name public_url, the balancer, which now has only the survivor).
	survivor := goClient("http://"+addrs[1], r)
	byClient := map[string]int{}
	for _, a := range st.acks {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		if err := goDownload(ctx, survivor, a); err != nil {
			t.Errorf("acknowledged upload by %s lost or changed: %v", a.by, err)
		}
		cancel()
		byClient[a.by]++
	}
	t.Logf("acknowledged uploads checked on the survivor: %v", byClient)
}
