package main

import (
	"errors"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xetclient"
)

// crashLog records, for the uploads of TestAcknowledgedWritesSurviveSIGKILL, what was sent and
// what the origin acknowledged before it was killed.
type crashLog struct {
	mu          sync.Mutex
	xorbSent    map[hash.Hash]bool // value: acknowledged (200)
	files       []fileUp
	fileAcked   map[hash.Hash]bool
	interrupted int           // requests that got no answer (the kill cut them off)
	shardsOpen  int           // shard requests sent and not answered yet
	events      chan struct{} // a file was acknowledged or a shard request sent
}

// ready reports whether the kill may come: enough files acknowledged, and shard requests in
// flight (so the kill may land inside a registration, not only between requests).
func (c *crashLog) ready(files, shards int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.fileAcked) >= files && c.shardsOpen >= shards
}

// upload sends f's xorbs, then its shard (/v1 or /v2), and records the outcome. It stops at
// the first request without an answer; an answer other than 200 is a test failure.
func (c *crashLog) upload(t *testing.T, base, tok string, f fileUp, shardPath string) bool {
	for _, x := range f.xorbs {
		c.mu.Lock()
		if _, seen := c.xorbSent[x.hash]; !seen {
			c.xorbSent[x.hash] = false // sent, not (yet) acknowledged
		}
		c.mu.Unlock()
		a, err := do("POST", base+x.path(), tok, x.body)
		if err != nil {
			c.mu.Lock()
			c.interrupted++
			c.mu.Unlock()
			return false
		}
		if a.status != http.StatusOK {
			t.Errorf("xorb %s: %d %s", x.hash, a.status, a.body)
			return false
		}
		c.mu.Lock()
		c.xorbSent[x.hash] = true
		c.mu.Unlock()
	}
	c.mu.Lock()
	c.files = append(c.files, f)
	c.shardsOpen++
	c.mu.Unlock()
	c.events <- struct{}{}
	a, err := do("POST", base+shardPath, tok, f.shard)
	c.mu.Lock()
	c.shardsOpen--
	c.mu.Unlock()
	if err != nil || (a.status == http.StatusOK && !shardAccepted(shardPath, a) && lastFrame(a.body).Type == "") {
		c.mu.Lock() // no answer, or a stream cut before its terminal frame
		c.interrupted++
		c.mu.Unlock()
		return false
	}
	if !shardAccepted(shardPath, a) {
		t.Errorf("shard of file %s (%s): %d %s", f.hash, shardPath, a.status, a.body)
		return false
	}
	c.mu.Lock()
	c.fileAcked[f.hash] = true
	c.mu.Unlock()
	c.events <- struct{}{}
	return true
}

// TestAcknowledgedWritesSurviveSIGKILL runs concurrent xorb and shard uploads against the
// origin, kills it with SIGKILL while they are in flight, restarts it on the same configuration
// and checks: every acknowledged xorb is in the index, every acknowledged file downloads
// byte-exact, and every file whose shard was in flight is either whole or absent (404), never
// half registered. The interrupted files are then uploaded again and must work.
func TestAcknowledgedWritesSurviveSIGKILL(t *testing.T) {
	bin := buildBinary(t)
	for _, bc := range backendCases() {
		t.Run(bc.name, func(t *testing.T) {
			o := newOrigin(t, bin)
			bc.configure(t, o)
			srv := o.start(t)
			if st, _ := call(t, "GET", o.base()+"/healthz", "", nil); st != 200 {
				t.Fatalf("healthz %d", st)
			}
			const scope = "models/crash/test"
			w := o.token(t, scope, "write")

			// Every file is one xorb from a small shared pool (concurrent uploads of one xorb,
			// shards naming xorbs that other shards registered) and two of its own.
			const workers, killAfter = 6, 12
			rng := mrand.New(mrand.NewPCG(7, 7))
			pool := []xorbUp{makeXorb(rng, 5), makeXorb(rng, 5), makeXorb(rng, 5)}
			log := &crashLog{xorbSent: map[hash.Hash]bool{}, fileAcked: map[hash.Hash]bool{},
				events: make(chan struct{}, 4096)}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for i := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := mrand.New(mrand.NewPCG(uint64(i), 99))
					for n := 0; ; n++ {
						select {
						case <-stop:
							return
						default:
						}
						f := makeFile(pool[(i+n)%len(pool)], makeXorb(rng, 4), makeXorb(rng, 4))
						path := "/v1/shards"
						if (i+n)%2 == 1 {
							path = "/v2/shards"
						}
						if !log.upload(t, o.base(), w, f, path) {
							return
						}
					}
				}()
			}
			deadline := time.After(30 * time.Second)
			for !log.ready(killAfter, 2) {
				select {
				case <-log.events:
				case <-deadline:
					close(stop)
					t.Fatalf("fewer than %d files acknowledged in 30 s", killAfter)
				}
			}
			srv.Kill()
			close(stop)
			wg.Wait()
			if t.Failed() {
				return
			}
			log.mu.Lock()
			defer log.mu.Unlock()
			if log.interrupted == 0 {
				t.Fatal("no upload was in flight when the origin was killed")
			}

			o.start(t)
			r := o.token(t, scope, "read")
			c := o.client(t, r)
			ackedX, ackedF := 0, 0
			for x, acked := range log.xorbSent {
				st, _ := call(t, "HEAD", o.base()+"/v1/xorbs/default/"+x.String(), r, nil)
				switch {
				case acked && st != http.StatusOK:
					t.Errorf("acknowledged xorb %s: HEAD %d after the restart", x, st)
				case !acked && st != http.StatusOK && st != http.StatusNotFound:
					t.Errorf("interrupted xorb %s: HEAD %d after the restart", x, st)
				}
				if acked {
					ackedX++
				}
			}
			var redo []fileUp
			for _, f := range log.files {
				got, err := download(c, f.hash)
				switch {
				case log.fileAcked[f.hash] && err != nil:
					t.Errorf("acknowledged file %s after the restart: %v", f.hash, err)
				case err != nil && !errors.Is(err, xetclient.ErrNotFound):
					t.Errorf("interrupted file %s is half registered: %v", f.hash, err)
				case err == nil && string(got) != string(f.data):
					t.Errorf("file %s downloads %d bytes that differ from the %d uploaded", f.hash, len(got), len(f.data))
				case err != nil:
					redo = append(redo, f)
				}
				if log.fileAcked[f.hash] {
					ackedF++
				}
			}
			t.Logf("after the kill: %d acknowledged xorbs and %d acknowledged files intact; %d requests cut off, "+
				"%d shards in flight: %d registered whole, %d not at all", ackedX, ackedF, log.interrupted,
				len(log.files)-ackedF, len(log.files)-ackedF-len(redo), len(redo))
			// A client retries what was cut off; the retries must work.
			for _, f := range redo {
				for _, x := range f.xorbs {
					if st, ans := call(t, "POST", o.base()+x.path(), w, x.body); st != http.StatusOK {
						t.Fatalf("xorb %s again: %d %s", x.hash, st, ans)
					}
				}
				if st, ans := call(t, "POST", o.base()+"/v1/shards", w, f.shard); st != http.StatusOK {
					t.Fatalf("shard of %s again: %d %s", f.hash, st, ans)
				}
				checkDownload(t, c, f.hash, f.data)
			}
		})
	}
}

// TestGracefulStop checks that SIGTERM drains and exits 0.
func TestGracefulStop(t *testing.T) {
	bin := buildBinary(t)
	o := newOrigin(t, bin)
	p := o.start(t)
	if st, _ := call(t, "GET", o.base()+"/readyz", "", nil); st != 200 {
		t.Fatalf("readyz %d", st)
	}
	if err := p.Stop(); err != nil { // SIGTERM; killed after 30 s
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	if _, err := os.Stat(filepath.Join(o.dir, "keys", "signing.pem")); err != nil {
		t.Fatalf("signing key: %v", err)
	}
}
