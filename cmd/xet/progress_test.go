package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestProgressLine(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		done, total int64
		after       time.Duration
		want        string
	}{
		{0, 100 << 20, time.Second, "x [------------------------]   0.0% 0 B / 100.0 MiB    0.0 MB/s"},
		{50 << 20, 100 << 20, 2 * time.Second, "x [############------------]  50.0% 50.0 MiB / 100.0 MiB   26.2 MB/s ETA 0:02"},
		{100 << 20, 100 << 20, 4 * time.Second, "x [########################] 100.0% 100.0 MiB / 100.0 MiB   26.2 MB/s"},
		{3 << 30, 0, 10 * time.Second, "x 3.0 GiB  322.1 MB/s"},
		{512, 0, 0, "x 512 B    0.0 MB/s"},
	} {
		p := newProgressBarTo(&bytes.Buffer{}, "x", func() time.Time { return t0 })
		p.done, p.total = tc.done, tc.total
		if got := p.line(t0.Add(tc.after)); got != tc.want {
			t.Errorf("line(%d/%d after %v)\n got %q\nwant %q", tc.done, tc.total, tc.after, got, tc.want)
		}
	}
}

func TestProgressRateLimited(t *testing.T) {
	now := time.Unix(1000, 0)
	var buf bytes.Buffer
	p := newProgressBarTo(&buf, "x", func() time.Time { return now })
	for i := 0; i < 100; i++ {
		now = now.Add(10 * time.Millisecond) // 1 s in all: at most 10 redraws at 100 ms
		p.update(int64(i), 100)
	}
	p.finish()
	draws := strings.Count(buf.String(), "\r")
	if draws < 5 || draws > 12 {
		t.Errorf("%d redraws for 100 updates over 1 s", draws)
	}
	if !strings.HasSuffix(buf.String(), "\n") {
		t.Error("finish did not end the line")
	}
	var nilBar *progressBar // not a terminal: nothing drawn, no panic
	nilBar.update(1, 2)
	nilBar.finish()
	if newProgressBar(&buf, "x") != nil {
		t.Error("progress bar enabled on a non-terminal")
	}
}

func TestFormatETA(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "0:00", 61 * time.Second: "1:01", 3*time.Hour + 5*time.Second: "3:00:05"} {
		if got := formatETA(d); got != want {
			t.Errorf("formatETA(%v) = %q, want %q", d, got, want)
		}
	}
}
