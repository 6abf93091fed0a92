package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// progressBar draws one self-overwriting status line on a terminal: label, bar, percent, bytes,
// rate and ETA. Redraws are limited to one per interval; the final state is always drawn by
// finish. A nil *progressBar is valid and draws nothing, so callers need no checks. It is safe
// for concurrent use.
type progressBar struct {
	w        io.Writer
	label    string
	interval time.Duration
	now      func() time.Time

	mu       sync.Mutex
	start    time.Time
	lastDraw time.Time
	done     int64
	total    int64
	width    int // length of the last line drawn, to blank leftovers
}

// newProgressBar returns a bar drawing on stderr when stderr is a terminal, and nil (no output)
// otherwise.
func newProgressBar(stderr io.Writer, label string) *progressBar {
	if !isTerminal(stderr) {
		return nil
	}
	return newProgressBarTo(stderr, label, time.Now)
}

func newProgressBarTo(w io.Writer, label string, now func() time.Time) *progressBar {
	return &progressBar{w: w, label: label, interval: 100 * time.Millisecond, now: now, start: now()}
}

// isTerminal reports whether w is a character device (a terminal), without x/term.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// update records progress and redraws if the last redraw is older than the interval.
func (p *progressBar) update(done, total int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done, p.total = done, total
	if t := p.now(); t.Sub(p.lastDraw) >= p.interval {
		p.lastDraw = t
		p.draw(t)
	}
}

// finish draws the final state and ends the line.
func (p *progressBar) finish() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.draw(p.now())
	fmt.Fprintln(p.w)
}

func (p *progressBar) draw(t time.Time) {
	line := p.line(t)
	pad := ""
	if n := p.width - len(line); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	p.width = len(line)
	fmt.Fprintf(p.w, "\r%s%s", line, pad)
}

// line renders the status line for time t.
func (p *progressBar) line(t time.Time) string {
	const barWidth = 24
	elapsed := t.Sub(p.start).Seconds()
	rate := 0.0
	if elapsed > 0 {
		rate = float64(p.done) / elapsed
	}
	var b strings.Builder
	b.WriteString(p.label)
	if p.total > 0 {
		frac := min(float64(p.done)/float64(p.total), 1)
		fill := int(frac * barWidth)
		fmt.Fprintf(&b, " [%s%s] %5.1f%% %s / %s", strings.Repeat("#", fill), strings.Repeat("-", barWidth-fill),
			100*frac, formatBytes(p.done), formatBytes(p.total))
	} else {
		fmt.Fprintf(&b, " %s", formatBytes(p.done))
	}
	fmt.Fprintf(&b, " %6.1f MB/s", rate/1e6)
	if p.total > 0 && rate > 0 && p.done < p.total {
		eta := time.Duration(float64(p.total-p.done) / rate * float64(time.Second))
		fmt.Fprintf(&b, " ETA %s", formatETA(eta))
	}
	return b.String()
}

// formatBytes renders n with a binary unit.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// formatETA renders d as m:ss or h:mm:ss.
func formatETA(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}
