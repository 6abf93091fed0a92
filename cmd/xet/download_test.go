package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"testing"
)

func TestParseRange(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want [2]int64
		ok   bool
	}{
		{"0-0", [2]int64{0, 0}, true},
		{"10-99", [2]int64{10, 99}, true},
		{"5-", [2]int64{5, math.MaxInt64}, true},
		{"9-3", [2]int64{}, false},
		{"-5", [2]int64{}, false},
		{"abc", [2]int64{}, false},
		{"1-x", [2]int64{}, false},
		{"", [2]int64{}, false},
	} {
		got, err := parseRange(tc.in)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("parseRange(%q) = %v, %v", tc.in, got, err)
		}
	}
}

func TestTransferUsageErrors(t *testing.T) {
	h := "0000000000000000000000000000000000000000000000000000000000000000"
	for _, tc := range []struct {
		name string
		run  func(context.Context, []string, *bytes.Buffer, *bytes.Buffer) error
		args []string
	}{
		{"upload no file", wrap(runUpload), []string{"--endpoint", "http://127.0.0.1:1"}},
		{"upload no endpoint", wrap(runUpload), []string{"f"}},
		{"upload bad flag", wrap(runUpload), []string{"--nope"}},
		{"download no hash", wrap(runDownload), []string{"--endpoint", "http://x", "-o", "o"}},
		{"download bad hash", wrap(runDownload), []string{"--endpoint", "http://x", "--hash", "zz", "-o", "o"}},
		{"download no out", wrap(runDownload), []string{"--endpoint", "http://x", "--hash", h}},
		{"download bad range", wrap(runDownload), []string{"--endpoint", "http://x", "--hash", h, "--range", "9-1", "-o", "o"}},
		{"download extra arg", wrap(runDownload), []string{"--endpoint", "http://x", "--hash", h, "-o", "o", "extra"}},
	} {
		var out, errb bytes.Buffer
		if err := tc.run(context.Background(), tc.args, &out, &errb); !errors.Is(err, errUsage) {
			t.Errorf("%s: err = %v, want a usage error", tc.name, err)
		}
		if out.Len() != 0 {
			t.Errorf("%s: wrote to stdout: %q", tc.name, out.String())
		}
	}
}

func wrap(f func(context.Context, []string, io.Writer, io.Writer) error) func(context.Context, []string, *bytes.Buffer, *bytes.Buffer) error {
	return func(ctx context.Context, a []string, o, e *bytes.Buffer) error { return f(ctx, a, o, e) }
}
