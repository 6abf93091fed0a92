package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xetcdn/xetcdn/internal/testenv"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

func TestSynth(t *testing.T) {
	s := &synth{seed: 3, xorbs: 50, chunks: 64, maxTerms: 500, repos: 7, hashes: make([]hash.Hash, 50)}
	layouts := map[hash.Hash]*xorb.Layout{}
	for x := range s.xorbs {
		l := s.layout(x)
		b, err := l.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		// What an edge does with a layout from the origin: decode and check the merkle hash.
		if _, err := xorb.UnmarshalLayout(b); err != nil {
			t.Fatalf("xorb %d: %v", x, err)
		}
		layouts[l.Hash] = l
	}
	single, many := 0, 0
	for j := range 400 {
		rec := s.record(j)
		b, err := rec.MarshalBinary()
		if err != nil {
			t.Fatalf("file %d: %v", j, err)
		}
		if len(rec.Terms) == 1 {
			single++
		}
		many = max(many, len(rec.Terms))
		for i, term := range rec.Terms {
			l := layouts[term.Xorb]
			bs, be := l.ByteRange(term.Start, term.End)
			if l == nil || l.RawRange(term.Start, term.End) != term.RawBytes || bs != term.ByteStart || be != term.ByteEnd {
				t.Fatalf("file %d term %d disagrees with its layout", j, i)
			}
		}
		if again, _ := s.record(j).MarshalBinary(); !bytes.Equal(again, b) {
			t.Fatalf("file %d is not deterministic", j)
		}
	}
	if single < 180 || single > 300 || many < 50 {
		t.Errorf("%d of 400 files single-term, largest %d terms", single, many)
	}
}

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-dsn", ""}, "-dsn: required"},
		{[]string{"-dsn", "x", "-files", "0"}, "-files: 0"},
		{[]string{"-dsn", "x", "-chunks", "2000"}, "-chunks: 2000"},
		{[]string{"-dsn", "x", "-files", "5", "-repos", "6"}, "-repos: 6"},
		{[]string{"-dsn", "x", "extra"}, `unexpected argument "extra"`},
	} {
		var se bytes.Buffer
		if code := run(context.Background(), tc.args, io.Discard, &se); code != 2 || !strings.Contains(se.String(), tc.want) {
			t.Errorf("indexload %q = %d, %q; want 2 and %q", tc.args, code, se.String(), tc.want)
		}
	}
}

// freshDatabase creates an empty database on the test PostgreSQL, dropped when the test ends.
func freshDatabase(t *testing.T) string {
	admin := testenv.Require(t, testenv.PostgresDSN)
	var b [6]byte
	rand.Read(b[:])
	name := "xet_indexload_" + hex.EncodeToString(b[:])
	exec := func(stmt string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		_, err = c.Exec(ctx, stmt)
		return err
	}
	if err := exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		if err := exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// TestLoadIntoPostgres: refused before the schema exists; loaded once the origin has migrated
// the database; refused a second time; and the real origin then answers a reconstruction of a
// sampled file with its terms, in its scope only.
func TestLoadIntoPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the origin")
	}
	dsn := freshDatabase(t)
	dir := t.TempDir()
	sample := filepath.Join(dir, "sample.jsonl")
	args := []string{"-dsn", dsn, "-files", "3000", "-xorbs", "400", "-repos", "30", "-max-terms", "300", "-sample", sample, "-samples", "20"}
	var so, se bytes.Buffer
	if code := run(context.Background(), args, &so, &se); code != 2 || !strings.Contains(se.String(), "no xetcdn index schema") {
		t.Fatalf("before the schema: %d %q", code, se.String())
	}
	origin := testenv.Build(t, "github.com/xetcdn/xetcdn/cmd/xet-origin")
	cfg := filepath.Join(dir, "origin.json")
	os.WriteFile(cfg, []byte(`{"index":{"driver":"postgres"}}`), 0o600)
	odir, addr := t.TempDir(), testenv.FreeAddr(t)
	start := func() *testenv.Process {
		return testenv.Start(t, origin, []string{"--data-dir", odir, "--listen", addr, "--config", cfg},
			testenv.Options{Env: []string{"XETCDN_POSTGRES_DSN=" + dsn}, Ready: `"msg":"xet-origin serving"`})
	}
	p := start()
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	se.Reset()
	if code := run(context.Background(), args, &so, &se); code != 0 {
		t.Fatalf("load: %d\n%s", code, se.String())
	}
	t.Log(so.String())
	if !strings.Contains(so.String(), "400 xorbs") || !strings.Contains(so.String(), "3000 files") {
		t.Errorf("summary: %s", so.String())
	}
	se.Reset()
	if code := run(context.Background(), args, &so, &se); code != 2 || !strings.Contains(se.String(), "already holds") {
		t.Fatalf("second load: %d %q", code, se.String())
	}
	start()
	f, err := os.Open(sample)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		var e struct {
			Scope, File string
			Size        uint64
			Terms       int
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		n++
		if n > 3 {
			continue
		}
		tok := testenv.Run(t, origin, "token", "--data-dir", odir, "--scope", e.Scope, "--access", "read")
		other := testenv.Run(t, origin, "token", "--data-dir", odir, "--scope", "models/load/elsewhere", "--access", "read")
		for _, c := range []struct {
			tok    string
			status int
		}{{tok, 200}, {other, 404}} {
			req, _ := http.NewRequest("GET", "http://"+addr+"/v2/reconstructions/"+e.File, nil)
			req.Header.Set("Authorization", "Bearer "+c.tok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.status {
				t.Fatalf("%s in %s: %d %s, want %d", e.File, e.Scope, resp.StatusCode, b, c.status)
			}
			if c.status != 200 {
				continue
			}
			var ans struct {
				Terms []struct {
					UnpackedLength uint64 `json:"unpacked_length"`
				} `json:"terms"`
			}
			if err := json.Unmarshal(b, &ans); err != nil {
				t.Fatal(err)
			}
			var size uint64
			for _, term := range ans.Terms {
				size += term.UnpackedLength
			}
			if len(ans.Terms) > e.Terms || len(ans.Terms) == 0 || size != e.Size {
				t.Errorf("%s: %d terms of %d bytes, sample says %d terms of %d bytes", e.File, len(ans.Terms), size, e.Terms, e.Size)
			}
		}
	}
	if n != 20 {
		t.Errorf("sample has %d lines, want 20", n)
	}
}
