package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// FreeAddr returns a loopback host:port nobody listens on (TCP or UDP) and no other test
// process has been given, reserved for this process until it exits.
//
// Ports come from below the kernel's ephemeral range (net.ipv4.ip_local_port_range), so neither
// a bind to port 0 nor an outgoing connection of any process can take one between FreeAddr and
// the caller's bind. Test processes running side by side (go test runs packages in parallel)
// reserve their ports with a lock on a file per port in a directory under os.TempDir: the lock
// lasts as long as the process, and the kernel drops it when the process dies. Within one
// process a port is never handed out twice. Where none of that is possible (no such range, no
// lock directory) it falls back to the kernel's choice of a free port, still never repeated
// within the process: the kernel picks at random, and two calls in a row can otherwise get the
// same port once the first listener is closed.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// freeAddrs holds every address FreeAddr has returned in this process and the open lock files
// that reserve them.
var freeAddrs = struct {
	sync.Mutex
	given map[string]bool
	locks []*os.File
}{given: map[string]bool{}}

// Reserved ports are drawn from [reserveLow, the ephemeral range's start).
const reserveLow = 20000

func freeAddr() (string, error) {
	freeAddrs.Lock()
	defer freeAddrs.Unlock()
	if addr, ok := reservedAddr(); ok {
		return addr, nil
	}
	for range 1000 { // the fallback: the kernel's choice, never repeated
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		addr := l.Addr().String()
		l.Close()
		if !freeAddrs.given[addr] {
			freeAddrs.given[addr] = true
			return addr, nil
		}
	}
	return "", errors.New("FreeAddr: no port this process has not been given already")
}

// reservedAddr finds an unused port in [reserveLow, the ephemeral range's start) that no other
// test process holds, and locks it for this one; false when there is no such range or no lock
// directory, or 1,000 draws found nothing. freeAddrs must be locked.
func reservedAddr() (string, bool) {
	lo, hi := reserveLow, ephemeralStart()
	if hi-lo < 1000 {
		return "", false
	}
	dir := filepath.Join(os.TempDir(), "xetcdn-test-ports")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", false
	}
	for range 1000 {
		port := strconv.Itoa(lo + rand.IntN(hi-lo))
		addr := net.JoinHostPort("127.0.0.1", port)
		if freeAddrs.given[addr] {
			continue
		}
		f, ok := lockFile(filepath.Join(dir, port))
		if !ok {
			continue // another test process holds it, or the directory is not ours
		}
		if !unused(addr) {
			f.Close() // releases the lock
			continue
		}
		freeAddrs.given[addr] = true
		freeAddrs.locks = append(freeAddrs.locks, f)
		return addr, true
	}
	return "", false
}

// unused reports whether nothing listens on addr over TCP or UDP (the edge serves HTTP/3 on
// the UDP port of its TLS listener).
func unused(addr string) bool {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	l.Close()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	pc.Close()
	return true
}

// ephemeralStart is the first port of the kernel's ephemeral range (0 when it cannot be read),
// read once per process.
var ephemeralStart = sync.OnceValue(func() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(f[0])
	return n
})

// SyncBuffer collects what several goroutines write (a child process's output copied by
// os/exec, a logger) and lets a test read it while they still write.
type SyncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what has been written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Build compiles the command pkg (an import path, or a path relative to the test's package
// directory) into a directory of the test and returns the binary's path. The go build cache
// makes a second build of an unchanged package cheap, but not free: a test binary that runs
// many tests against one command keeps a Binaries instead.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	bin, err := build(t.TempDir(), pkg)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// build runs `go build -o dir/ pkg` and returns the one file it wrote; dir must be empty.
func build(dir, pkg string) (string, error) {
	out, err := exec.Command(GoTool(), "build", "-o", dir+string(filepath.Separator), pkg).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	if len(ents) != 1 {
		return "", fmt.Errorf("go build %s wrote %d files, want one command", pkg, len(ents))
	}
	return filepath.Join(dir, ents[0].Name()), nil
}

// Binaries builds each command once per test binary run: make one in TestMain, Close it after
// m.Run. It is safe for concurrent use.
type Binaries struct {
	dir   string
	mu    sync.Mutex
	built map[string]string // package -> binary
}

// NewBinaries makes an empty set of binaries in a new temporary directory.
func NewBinaries() (*Binaries, error) {
	dir, err := os.MkdirTemp("", "xetcdn-bin-")
	if err != nil {
		return nil, err
	}
	return &Binaries{dir: dir, built: make(map[string]string)}, nil
}

// Build returns the binary of pkg, building it on the first call for pkg.
func (b *Binaries) Build(t testing.TB, pkg string) string {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if bin, ok := b.built[pkg]; ok {
		return bin
	}
	dir, err := os.MkdirTemp(b.dir, "pkg-")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := build(dir, pkg)
	if err != nil {
		t.Fatal(err)
	}
	b.built[pkg] = bin
	return bin
}

// Close removes every binary built.
func (b *Binaries) Close() error { return os.RemoveAll(b.dir) }

// Run runs bin to completion and returns its standard output without surrounding white space;
// a failure (start, or a non-zero exit) fails the test with the command's standard error.
func Run(t testing.TB, bin string, args ...string) string {
	t.Helper()
	var stderr strings.Builder
	cmd := exec.Command(bin, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", filepath.Base(bin), args, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// RunStatus runs bin to completion (bounded to 30 s) with env as its whole environment (nil: the
// test process's) and returns its exit status, standard output and standard error. Only a
// failure to run it fails the test; a non-zero exit is the caller's to check.
func RunStatus(t testing.TB, bin string, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if _, exited := errors.AsType[*exec.ExitError](err); !exited {
			t.Fatalf("%s %q: %v", filepath.Base(bin), args, err)
		}
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// Options says how Start runs a process and when it counts as started. The zero value starts
// the process and returns at once.
type Options struct {
	// Env is added to the test process's environment.
	Env []string
	// Ready, when set, makes Start wait for a line of the process's output (stdout and stderr)
	// that contains it, such as `"msg":"xet-origin serving"`.
	Ready string
	// Healthy, when set, makes Start poll this URL (after Ready, if both are set) until it
	// answers 200.
	Healthy string
	// StartTimeout bounds the wait for Ready and Healthy; the default is 60 s.
	StartTimeout time.Duration
	// StopTimeout is how long Stop (and the cleanup) wait after SIGTERM before they SIGKILL; the
	// default is 30 s.
	StopTimeout time.Duration
	// ShowOnFailure selects the lines of the log shown when the test fails (its last 80 such
	// lines); nil shows every line.
	ShowOnFailure func(line string) bool
}

// Process is a process a test started with Start. Its output (stdout and stderr together) goes
// to a log file; the tail of the log is shown when the test fails. When the test ends it is
// stopped like Stop does, unless it has exited already. Its methods are safe for concurrent
// use.
type Process struct {
	cmd  *exec.Cmd
	name string
	log  string // path of the log file
	opts Options

	exited  chan struct{} // closed when the process has been waited for
	err     error         // Wait's result; read after exited is closed
	logDone chan struct{} // closed when the output pipe hit EOF
}

// shownLines is how many log lines a failure shows.
const shownLines = 80

// Start runs bin with args and returns once it is started as opts say. If the process exits
// before that, or the wait times out, the test fails with the tail of its log.
func Start(t testing.TB, bin string, args []string, opts Options) *Process {
	t.Helper()
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 60 * time.Second
	}
	if opts.StopTimeout == 0 {
		opts.StopTimeout = 30 * time.Second
	}
	name := filepath.Base(bin)
	logPath := filepath.Join(t.TempDir(), name+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		lf.Close()
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), opts.Env...)
	cmd.Stdout, cmd.Stderr = pw, pw
	dieWithParent(cmd)
	err = cmd.Start()
	pw.Close() // the child holds its own copy: EOF on pr once it exits
	if err != nil {
		pr.Close()
		lf.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &Process{cmd: cmd, name: name, log: logPath, opts: opts,
		exited: make(chan struct{}), logDone: make(chan struct{})}
	ready := make(chan struct{})
	go func() { // copy the output to the log, watching for the Ready marker
		defer close(p.logDone)
		defer lf.Close()
		defer pr.Close()
		r := bufio.NewReader(pr)
		marked := opts.Ready == ""
		for {
			line, err := r.ReadString('\n')
			lf.WriteString(line)
			if !marked && strings.Contains(line, opts.Ready) {
				marked = true
				close(ready)
			}
			if err != nil {
				return
			}
		}
	}()
	go func() {
		p.err = cmd.Wait()
		// Exited promises the whole log: the copier reaches EOF once the child is gone (bounded,
		// in case something else still holds the pipe).
		select {
		case <-p.logDone:
		case <-time.After(5 * time.Second):
		}
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			if err := p.Stop(); err != nil {
				t.Logf("%s at the end of the test: %v", name, err)
			}
		}
		<-p.logDone
		if t.Failed() {
			t.Logf("%s log (last %d lines shown):\n%s", name, shownLines, p.tail())
		}
	})

	deadline := time.NewTimer(opts.StartTimeout)
	defer deadline.Stop()
	if opts.Ready != "" {
		select {
		case <-ready:
		case <-p.exited:
			<-p.logDone
			t.Fatalf("%s exited (%v) before logging %q:\n%s", name, p.err, opts.Ready, p.tail())
		case <-deadline.C:
			t.Fatalf("%s did not log %q within %v:\n%s", name, opts.Ready, opts.StartTimeout, p.tail())
		}
	}
	if opts.Healthy != "" {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for !answers200(opts.Healthy) {
			select {
			case <-p.exited:
				<-p.logDone
				t.Fatalf("%s exited (%v) before %s answered:\n%s", name, p.err, opts.Healthy, p.tail())
			case <-deadline.C:
				t.Fatalf("%s: %s did not answer 200 within %v:\n%s", name, opts.Healthy, opts.StartTimeout, p.tail())
			case <-tick.C:
			}
		}
	}
	return p
}

func answers200(url string) bool {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Exited is closed once the process has exited and its output is in the log.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// OpenFDs counts the process's open file descriptors (from /proc; the test is skipped where it
// cannot be read).
func (p *Process) OpenFDs(t testing.TB) int {
	t.Helper()
	es, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.Pid()))
	if err != nil {
		t.Skipf("cannot count fds: %v", err)
	}
	return len(es)
}

// Signal sends sig to the process.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Stop sends SIGTERM and waits for the exit; after Options.StopTimeout it sends SIGKILL. It
// returns the process's exit error (nil for status 0), or an error saying it had to be killed.
// Stopping an exited process returns how it exited.
func (p *Process) Stop() error {
	select {
	case <-p.exited:
		return p.err
	default:
	}
	if err := p.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	timer := time.NewTimer(p.opts.StopTimeout)
	defer timer.Stop()
	select {
	case <-p.exited:
		return p.err
	case <-timer.C:
		p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("no exit within %v of SIGTERM: killed (%v)", p.opts.StopTimeout, p.err)
	}
}

// Kill sends SIGKILL (a crash, as the process sees it: no drain) and waits for the exit.
func (p *Process) Kill() error {
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-p.exited
	return p.err
}

// Log returns what the process has written so far.
func (p *Process) Log() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// tail returns the last shownLines lines of the log that ShowOnFailure selects.
func (p *Process) tail() string {
	var kept []string
	for _, l := range strings.Split(strings.TrimRight(p.Log(), "\n"), "\n") {
		if p.opts.ShowOnFailure == nil || p.opts.ShowOnFailure(l) {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept[max(0, len(kept)-shownLines):], "\n")
}
