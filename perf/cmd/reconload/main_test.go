package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xetcdn/xetcdn/internal/testenv"
)

const okLine = `{"scope":"models/a/b","file":"b8126b2a46feadfcccb102deec5d0fe675c58976f491649318e107c3411b16fa","size":10,"terms":1}`

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.jsonl", okLine+"\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-sample", good}, "-url: required"},
		{[]string{"-url", "127.0.0.1:1", "-sample", good}, `-url: "127.0.0.1:1": want http://`},
		{[]string{"-url", "http://x"}, "-sample: required"},
		{[]string{"-url", "http://x", "-sample", good, "-rate", "0"}, "-rate: 0"},
		{[]string{"-url", "http://x", "-sample", good, "-zipf", "1"}, "-zipf: 1"},
		{[]string{"-url", "http://x", "-sample", good, "-range-share", "1.5"}, "-range-share: 1.5"},
		{[]string{"-url", "http://x", "-sample", good, "-duration", "0s"}, "-duration: 0s"},
		{[]string{"-url", "http://x", "-sample", good, "-concurrency", "0"}, "-concurrency: 0"},
		{[]string{"-url", "http://x", "-sample", good, "-token", "a", "-token-cmd", "b"}, "give one"},
		{[]string{"-url", "http://x", "-sample", good, "-pid", "origin"}, `"origin": want NAME=PID`},
		{[]string{"-url", "http://x", "-sample", good, "extra"}, `unexpected argument "extra"`},
		{[]string{"-url", "http://x", "-sample", filepath.Join(dir, "missing")}, "-sample: open"},
		{[]string{"-url", "http://x", "-sample", write("empty.jsonl", "")}, "-sample: no files"},
		{[]string{"-url", "http://x", "-sample", write("blank.jsonl", okLine+"\n\n")}, "sample line 2: empty"},
		{[]string{"-url", "http://x", "-sample", write("scope.jsonl", strings.Replace(okLine, `"models/a/b"`, `""`, 1))}, `sample line 1: field "scope": missing`},
		{[]string{"-url", "http://x", "-sample", write("file.jsonl", strings.Replace(okLine, `"b8126b`, `"zz126b`, 1))}, `sample line 1: field "file"`},
		{[]string{"-url", "http://x", "-sample", write("terms.jsonl", strings.Replace(okLine, `"terms":1`, `"terms":0`, 1))}, `sample line 1: field "terms": 0`},
		{[]string{"-url", "http://x", "-sample", write("size.jsonl", strings.Replace(okLine, `"size":10,`, ``, 1))}, `sample line 1: field "size": missing`},
		{[]string{"-url", "http://x", "-sample", write("extra.jsonl", strings.Replace(okLine, `}`, `,"x":1}`, 1))}, `sample line 1: json: unknown field "x"`},
		{[]string{"-url", "http://x", "-sample", good, "-pid", "origin=999999999"}, "-pid origin=999999999"},
	} {
		var se bytes.Buffer
		if code := run(context.Background(), tc.args, io.Discard, &se); code != 2 || !strings.Contains(se.String(), tc.want) {
			t.Errorf("reconload %q = %d, %q; want 2 and %q", tc.args, code, se.String(), tc.want)
		}
	}
}

// freshDatabase creates an empty database on the test PostgreSQL, dropped when the test ends.
func freshDatabase(t *testing.T) string {
	admin := testenv.Require(t, testenv.PostgresDSN)
	var b [6]byte
	rand.Read(b[:])
	name := "xet_reconload_" + hex.EncodeToString(b[:])
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

// TestAgainstOrigin: the real origin on an indexload-ed Postgres index answers an open-loop run
// with no error and the origin's CPU per request; with tokens of another origin (wrong key)
// every request fails, counted by class, and the run still reports (exit 3); a server that is
// gone fails the check before the clock starts.
func TestAgainstOrigin(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the origin")
	}
	dsn := freshDatabase(t)
	dir := t.TempDir()
	origin := testenv.Build(t, "github.com/xetcdn/xetcdn/cmd/xet-origin")
	indexload := testenv.Build(t, "github.com/xetcdn/xetcdn/perf/cmd/indexload")
	cfg := filepath.Join(dir, "origin.json")
	os.WriteFile(cfg, []byte(`{"index":{"driver":"postgres"}}`), 0o600)
	odir, addr := t.TempDir(), testenv.FreeAddr(t)
	start := func() *testenv.Process {
		return testenv.Start(t, origin, []string{"--data-dir", odir, "--listen", addr, "--config", cfg},
			testenv.Options{Env: []string{"XETCDN_POSTGRES_DSN=" + dsn}, Ready: `"msg":"xet-origin serving"`})
	}
	if err := start().Stop(); err != nil { // migrates the schema
		t.Fatal(err)
	}
	sample := filepath.Join(dir, "sample.jsonl")
	testenv.Run(t, indexload, "-dsn", dsn, "-files", "2000", "-xorbs", "300", "-repos", "5", "-chunks", "8",
		"-max-terms", "100", "-sample", sample, "-samples", "200")
	p := start()
	tokenCmd := origin + " token --data-dir " + odir + " --access read --ttl 1h --scope"
	out := filepath.Join(dir, "r.json")
	args := []string{"-url", "http://" + addr, "-sample", sample, "-token-cmd", tokenCmd, "-rate", "200",
		"-duration", "1s", "-range-share", "0.3", "-pid", "origin=" + itoa(p.Pid()), "-out", out}
	var so, se bytes.Buffer
	if code := run(context.Background(), args, &so, &se); code != 0 {
		t.Fatalf("run: %d\n%s\n%s", code, so.String(), se.String())
	}
	t.Log(so.String())
	var res result
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if res.Errors != 0 || res.Requests < 100 || res.Requests > 320 || res.Kinds["ranged"].N == 0 || res.Kinds["whole"].N == 0 ||
		res.CPUms["origin"] <= 0 || res.AnswerBytes == 0 {
		t.Errorf("result: %+v", res)
	}

	// Tokens signed by another origin's key: the check before the clock fails and names the 401.
	other := t.TempDir()
	testenv.Run(t, origin, "token", "--data-dir", other, "--scope", "x", "--access", "read")
	args[5] = origin + " token --data-dir " + other + " --access read --ttl 1h --scope"
	se.Reset()
	if code := run(context.Background(), args, io.Discard, &se); code != 1 || !strings.Contains(se.String(), "401") {
		t.Fatalf("foreign tokens: %d %q", code, se.String())
	}
	args[5] = tokenCmd

	// The connection is cut for a second in the middle of a run: the failures are counted by
	// class, the run goes on (requests after the cut succeed) and reports, exit 3.
	px := testenv.NewProxy(t, addr)
	args[1] = "http://" + px.Addr()
	args[9] = "3s"
	go func() {
		time.Sleep(1500 * time.Millisecond)
		px.Cut()
		time.Sleep(time.Second)
		if err := px.Restore(); err != nil {
			t.Error(err)
		}
	}()
	so.Reset()
	se.Reset()
	if code := run(context.Background(), args, &so, &se); code != 3 {
		t.Fatalf("cut: %d\n%s\n%s", code, so.String(), se.String())
	}
	t.Log(so.String())
	b, err = os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	res = result{}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if res.ErrorClasses["connection"] == 0 || res.Errors >= res.Requests || res.Kinds["all"].N < 200 {
		t.Errorf("cut: %+v", res)
	}

	// A server that is gone fails the check before the clock starts.
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	gone := []string{"-url", "http://" + addr, "-sample", sample, "-token-cmd", tokenCmd, "-duration", "1s"}
	se.Reset()
	if code := run(context.Background(), gone, io.Discard, &se); code != 1 || !strings.Contains(se.String(), "check before the run") {
		t.Fatalf("server gone: %d %q", code, se.String())
	}
	// ... and naming its (gone) process is bad input.
	se.Reset()
	if code := run(context.Background(), args, io.Discard, &se); code != 2 || !strings.Contains(se.String(), "-pid origin=") {
		t.Fatalf("gone -pid: %d %q", code, se.String())
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
