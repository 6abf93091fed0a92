package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as the process the tests start: with helperMode set it runs
// helper(mode) instead of the tests.
const (
	helperMode = "TESTENV_HELPER"
	helperAddr = "TESTENV_HELPER_ADDR"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperMode); mode != "" {
		os.Exit(helper(mode, os.Getenv(helperAddr)))
	}
	os.Exit(m.Run())
}

// helper is a server for the tests. "serve" listens on addr and logs "helper listening"; its
// /healthz answers 503 until /go was requested, which also logs "helper ready"; on SIGTERM it
// logs "helper got SIGTERM" and exits 0. "stubborn" ignores SIGTERM and logs "helper ready".
// "fail" logs "helper boom" and exits 3. "ports" takes 1,000 addresses from FreeAddr, prints
// them and a line "held", and keeps them until its standard input closes.
func helper(mode, addr string) int {
	switch mode {
	case "ports": // reserve 1000 ports, print them, hold them until stdin closes
		for range 1000 {
			a, err := freeAddr()
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			fmt.Println(a)
		}
		fmt.Println("held")
		io.Copy(io.Discard, os.Stdin)
		return 0
	case "fail":
		fmt.Fprintln(os.Stderr, "helper boom")
		return 3
	case "stubborn":
		signal.Ignore(syscall.SIGTERM)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var ready atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("/go", func(w http.ResponseWriter, r *http.Request) {
		if !ready.Swap(true) {
			fmt.Fprintln(os.Stderr, "helper ready")
		}
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if !ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	term := make(chan os.Signal, 1)
	if mode == "serve" {
		signal.Notify(term, syscall.SIGTERM)
	}
	go http.Serve(ln, mux)
	fmt.Fprintln(os.Stdout, "helper listening")
	if mode == "stubborn" {
		fmt.Fprintln(os.Stderr, "helper ready")
	}
	<-term
	fmt.Fprintln(os.Stderr, "helper got SIGTERM")
	return 0
}

func helperEnv(mode, addr string) []string {
	return []string{helperMode + "=" + mode, helperAddr + "=" + addr}
}

// recorder is a testing.TB whose Fatal ends only the calling goroutine and whose cleanups run
// when the test calls cleanup, so that Start's failures and cleanup can be checked.
type recorder struct {
	*testing.T
	mu       sync.Mutex
	fatal    string
	failed   bool
	cleanups []func()
}

func (r *recorder) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.fatal, r.failed = fmt.Sprintf(format, args...), true
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recorder) Fatal(args ...any) { r.Fatalf("%s", fmt.Sprint(args...)) }
func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}
func (r *recorder) Logf(string, ...any) {}

func (r *recorder) cleanup() {
	r.mu.Lock()
	fs := r.cleanups
	r.cleanups = nil
	r.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// start runs Start on r in a goroutine; the channel yields the process, or nil if Start
// failed, and then after(p) is evaluated at the moment Start returned.
func start(r *recorder, args []string, opts Options, after func(*Process) bool) <-chan result {
	out := make(chan result, 1)
	go func() {
		var res result
		defer func() { out <- res }()
		res.p = Start(r, os.Args[0], args, opts)
		if after != nil {
			res.ok = after(res.p)
		}
	}()
	return out
}

type result struct {
	p  *Process
	ok bool
}

// within waits for the result, failing after 30 s.
func within(t *testing.T, c <-chan result) result {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("Start did not return within 30 s")
		return result{}
	}
}

// answering polls url until it answers at all and returns the status.
func answering(t *testing.T, url string) int {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			return resp.StatusCode
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%s never answered", url)
		}
	}
}

func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestStartWaits checks that Start returns only once the Ready line was logged, or the
// Healthy URL answers 200 — the helper does neither until the test asks it to — and that the
// cleanup stops the process with SIGTERM.
func TestStartWaits(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts func(addr string) Options
		// at is checked when Start returns.
		at func(p *Process, addr string) bool
	}{
		{"ready", func(addr string) Options { return Options{Env: helperEnv("serve", addr), Ready: "helper ready"} },
			func(p *Process, _ string) bool { return strings.Contains(p.Log(), "helper ready") }},
		{"healthy", func(addr string) Options {
			return Options{Env: helperEnv("serve", addr), Healthy: "http://" + addr + "/healthz"}
		}, func(_ *Process, addr string) bool { return answers200("http://" + addr + "/healthz") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := FreeAddr(t)
			r := &recorder{T: t}
			defer r.cleanup()
			done := start(r, nil, tc.opts(addr), func(p *Process) bool { return tc.at(p, addr) })
			if st := answering(t, "http://"+addr+"/healthz"); st != http.StatusServiceUnavailable {
				t.Fatalf("helper healthz %d before /go", st)
			}
			select {
			case res := <-done:
				t.Fatalf("Start returned before the helper was ready (fatal %q, process %v)", r.fatal, res.p != nil)
			default:
			}
			get(t, "http://"+addr+"/go")
			res := within(t, done)
			if res.p == nil {
				t.Fatalf("Start failed: %s", r.fatal)
			}
			if !res.ok {
				t.Fatalf("Start returned before the process was ready; log:\n%s", res.p.Log())
			}
			r.cleanup()
			select {
			case <-res.p.Exited():
			default:
				t.Fatal("the cleanup returned with the process still running")
			}
			if !strings.Contains(res.p.Log(), "helper got SIGTERM") {
				t.Fatalf("the cleanup did not stop the process with SIGTERM; log:\n%s", res.p.Log())
			}
		})
	}
}

func TestStartFails(t *testing.T) {
	for _, tc := range []struct {
		name, mode string
		opts       Options
		want       []string // in the failure message
	}{
		{"exits", "fail", Options{Ready: "helper ready"}, []string{"exited", "exit status 3", "helper boom"}},
		{"ready timeout", "serve", Options{Ready: "never logged", StartTimeout: 100 * time.Millisecond},
			[]string{"did not log", "helper listening"}},
		{"healthy timeout", "serve", Options{Healthy: "/healthz", StartTimeout: 100 * time.Millisecond},
			[]string{"did not answer 200", "helper listening"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := FreeAddr(t)
			r := &recorder{T: t}
			tc.opts.Env = helperEnv(tc.mode, addr)
			if tc.opts.Healthy != "" {
				tc.opts.Healthy = "http://" + addr + tc.opts.Healthy
			}
			res := within(t, start(r, nil, tc.opts, nil))
			if res.p != nil {
				t.Fatal("Start succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(r.fatal, w) {
					t.Errorf("failure %q does not say %q", r.fatal, w)
				}
			}
			r.cleanup() // stops the helper that is still running
		})
	}
}

func TestStop(t *testing.T) {
	t.Run("SIGTERM", func(t *testing.T) {
		addr := FreeAddr(t)
		p := Start(t, os.Args[0], nil, Options{Env: helperEnv("serve", addr), Ready: "helper listening"})
		if err := p.Stop(); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		if !strings.Contains(p.Log(), "helper got SIGTERM") {
			t.Fatalf("log:\n%s", p.Log())
		}
		if err := p.Stop(); err != nil {
			t.Fatalf("Stop of a stopped process: %v", err)
		}
	})
	t.Run("kill after timeout", func(t *testing.T) {
		addr := FreeAddr(t)
		p := Start(t, os.Args[0], nil, Options{Env: helperEnv("stubborn", addr), Ready: "helper ready",
			StopTimeout: 100 * time.Millisecond})
		err := p.Stop()
		if err == nil || !strings.Contains(err.Error(), "killed") {
			t.Fatalf("Stop of a process that ignores SIGTERM: %v", err)
		}
		if !killed(p.err) {
			t.Fatalf("exit: %v, want SIGKILL", p.err)
		}
	})
	t.Run("Kill", func(t *testing.T) {
		addr := FreeAddr(t)
		p := Start(t, os.Args[0], nil, Options{Env: helperEnv("serve", addr), Ready: "helper listening"})
		if err := p.Kill(); !killed(err) {
			t.Fatalf("Kill: %v, want death by SIGKILL", err)
		}
		if strings.Contains(p.Log(), "SIGTERM") {
			t.Fatal("Kill sent SIGTERM")
		}
	})
}

func killed(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

func TestBuildAndRun(t *testing.T) {
	bin := Build(t, "./testdata/hello")
	if got := Run(t, bin); got != "hello from testenv" {
		t.Fatalf("Run: %q", got)
	}
	b, err := NewBinaries()
	if err != nil {
		t.Fatal(err)
	}
	one := b.Build(t, "./testdata/hello")
	if two := b.Build(t, "./testdata/hello"); two != one {
		t.Fatalf("second Build: %s, want the first one's %s", two, one)
	}
	if filepath.Base(one) != "hello" {
		t.Errorf("binary %s, want one named hello", one)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(one); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after Close: %v", err)
	}
}

func TestFreeAddr(t *testing.T) {
	addr := FreeAddr(t)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	ln.Close()
}

// TestFreeAddrDistinct asks for far more addresses than a random choice can give without a
// repeat (1,000 out of some 13,000 ports: dozens of repeats expected), so it fails if FreeAddr
// hands out a port twice.
func TestFreeAddrDistinct(t *testing.T) {
	distinctAddrs(t, 1000)
}

// distinctAddrs takes n addresses from FreeAddr and fails the test if one comes twice.
func distinctAddrs(t *testing.T, n int) []string {
	t.Helper()
	seen := map[string]bool{}
	addrs := make([]string, 0, n)
	for range n {
		addr := FreeAddr(t)
		if seen[addr] {
			t.Fatalf("FreeAddr returned %s twice", addr)
		}
		seen[addr] = true
		addrs = append(addrs, addr)
	}
	return addrs
}

func TestSyncBuffer(t *testing.T) {
	var b SyncBuffer
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				b.Write([]byte("ab"))
				_ = b.String() // read while others write: the race detector checks this
			}
		})
	}
	wg.Wait()
	if got := len(b.String()); got != 800 {
		t.Fatalf("len %d, want 800", got)
	}
}

// TestFreeAddrOtherProcess: while another test process holds 1,000 addresses from FreeAddr,
// 1,000 more here are all different from them (by chance some 75 would repeat).
func TestFreeAddrOtherProcess(t *testing.T) {
	if ephemeralStart()-reserveLow < 1000 {
		t.Skip("no port range below the ephemeral one to reserve from")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv("ports", "")...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	theirs := map[string]bool{}
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "held" {
		theirs[sc.Text()] = true
	}
	if len(theirs) != 1000 {
		t.Fatalf("the other process printed %d addresses", len(theirs))
	}
	for range 1000 {
		if a := FreeAddr(t); theirs[a] {
			t.Fatalf("FreeAddr gave %s, which another process holds", a)
		}
	}
}

// TestFreeAddrFallback: without a lock directory FreeAddr takes the kernel's choice of port,
// and still never the same one twice (1,000 draws from the ephemeral range repeat by chance).
func TestFreeAddrFallback(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", notDir) // the lock directory cannot be made under a file
	for _, addr := range distinctAddrs(t, 1000) {
		_, port, _ := net.SplitHostPort(addr)
		if p, _ := strconv.Atoi(port); ephemeralStart() > 0 && p < ephemeralStart() {
			t.Fatalf("FreeAddr returned %s, a reserved port, with no lock directory", addr)
		}
	}
}
